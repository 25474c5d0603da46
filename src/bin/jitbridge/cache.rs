//! `jitbridge cache`: show or maintain the disk cache of compiled code.

use crate::args::{
    Command, DEVICE_OPT, Opt, device_or_default, parse_args, parse_device, print_help,
};
use crate::{Failure, Outcome};
use std::path::Path;

pub const CACHE: Command = Command {
    name: "cache",
    usage: "jitbridge cache [show | clear | prune SIZE | verify [--fix] \
            | export FILE [--manifest M] [--with-sources] | import FILE | prewarm FILE [--device D] \
            | build FILE [--device D] [--jobs N] | coverage MANIFEST [--device D] \
            | remote [export [BUNDLE] | import MANIFEST]]",
    about: "show or maintain the disk cache of compiled code",
    details:
        "  show          the folder, its state, entries and size (the default); creates nothing
  clear         remove every entry
  prune SIZE    remove the oldest entries until at most SIZE bytes remain
  verify        check every entry as the library would before loading it (type, owner, mode,
                links, size, contents) and name each bad one (exit status 1 if any)
  verify --fix  the same, removing each bad entry
  export FILE   write every entry into the bundle FILE (one file, each entry with a SHA-256),
                replaced once whole; with --manifest M, only the kernels the manifest M names
                (exit status 1 if some of them were not in the cache); with --with-sources,
                each entry's source record (what rebuilds it, from the folder's sources/)
                rides along, checked as a kernel made through the API is
  import FILE   check every entry of the bundle FILE and store the good ones in the cache
                folder, creating it, with the source records it carries, each checked
                (hash, size, the API's rules, of its entry) before it is put into sources/
                (exit status 1 if any entry or record was bad)
  prewarm FILE  load every kernel of the manifest or bundle FILE into this process's memory,
                as a server does at start with jb_prewarm, compiling nothing, and say what it
                found and how long it took (exit status 1 if any was bad)
  build FILE    the compile farm: build every kernel of the manifest or bundle FILE that the
                device lacks from its source record, in N worker processes at once (--jobs N,
                1 to 1024; the default: the processors this process may use), each storing
                into the cache folder, then load them as prewarm does, and say what each step
                did and how long it took (exit status 1 if a kernel was not built or a record
                was bad: those compile at their first use). A bundle made for another
                architecture or compiler (exported --with-sources) is rebuilt for this one; a
                progress line shows on a terminal
  coverage MANIFEST
                for each kernel the manifest names, where a launch would get it from in a
                new process (the cache folder, a bundle) or that it would compile, loading
                and compiling nothing: what sealing (JITBRIDGE_SEAL=error) would refuse
                (exit status 1 if any would compile). Each kernel is checked on this host's
                device of the backend and architecture its line names (a cpu kernel on the
                cpu, a cuda sm_90 kernel on a cuda device of sm_90), and counts as other
                only when this host has no such device; with --device D, only D's kernels are
                checked and every other kernel counts as other
  remote        the remote tier (JITBRIDGE_REMOTE_CACHE, JITBRIDGE_REMOTE_KEY_FILE): its URL
                (secrets masked), mode, whether hiredis loaded, whether the store answers 5
                PINGs and the fastest round trip, and this process's remote counters (exit
                status 2 when no tier is set or its store does not answer)
  remote export [BUNDLE]
                seed the remote tier with every good entry of the bundle BUNDLE, or of the
                cache folder without one, each signed with the fleet's key as a compile's
                store is (a read-only tier is refused: exit status 2)
  remote import MANIFEST
                fill the cache folder from the remote tier with the kernels the manifest
                names, each checked as a build's remote load checks it (exit status 1 if a
                value was rejected)

A bundle can also be used in place, read-only: JITBRIDGE_CACHE_BUNDLE=FILE[:FILE...] puts
bundles behind the cache folder; JITBRIDGE_MANIFEST=FILE makes each process append the kernels
it builds or loads to a manifest. Bundles are trusted as the folder is.

Each action applies the library's trust rules: on a folder it would refuse (owned by another
user, writable by group or others, or under a parent others can write) it fails, naming the
folder and the fix. clear, prune and verify --fix act only in a folder that is the cache's own
(marked with CACHEDIR.TAG, or holding nothing else); in a shared one ($HOME, .) they fail and
remove nothing. A failure to remove an entry is an error (exit status 2).

SIZE is a whole number of bytes with an optional unit K, M, G or T, alone or followed by B or
iB, in any case; units are powers of 1024 (100M, 100MB and 100MiB are all 104857600 bytes).",
};

/// Bytes as a person reads them, exact in parentheses: "512 bytes", "15.6 KiB (16000 bytes)".
pub fn readable_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {} ({bytes} bytes)", UNITS[unit])
}

pub fn cache_command(args: &[String]) -> Outcome {
    use jitbridge::disk_cache;
    let opts = [
        Opt { flag: "--fix", value: None },
        Opt { flag: "--manifest", value: Some("a manifest (JITBRIDGE_MANIFEST's file)") },
        Opt { flag: "--with-sources", value: None },
        DEVICE_OPT,
        Opt { flag: "--jobs", value: Some("worker processes at once, 1 to 1024") },
    ];
    let Some(args) = parse_args(&CACHE, args, &opts)? else {
        print_help(&CACHE);
        return Ok(true);
    };
    let usage = |message: String| Failure::Usage(message, &CACHE);
    // Looks only: neither this nor anything below creates the folder.
    let show = || -> Outcome {
        out!("folder   {}", disk_cache::dir());
        out!("state    {}", disk_cache::state());
        let (entries, bytes) = disk_cache::stats()?;
        out!("entries  {entries}");
        out!("size     {}", readable_bytes(bytes));
        Ok(true)
    };
    let words: Vec<&str> = args.positional.iter().map(String::as_str).collect();
    let (action, rest) = words.split_first().map_or(("show", &[][..]), |(a, r)| (*a, r));
    let takes = |n: usize| match rest.get(n) {
        None => Ok(()),
        Some(extra) => Err(usage(format!("unexpected argument '{extra}' after `cache {action}`"))),
    };
    let owners = [
        ("--fix", "verify"),
        ("--manifest", "export"),
        ("--with-sources", "export"),
        ("--device", "prewarm"),
        ("--jobs", "build"),
    ];
    for (flag, owner) in owners {
        let shared = flag == "--device" && (action == "coverage" || action == "build");
        if args.has(flag) && action != owner && !shared {
            return Err(usage(format!("{flag} belongs to `cache {owner}`, not `cache {action}`")));
        }
    }
    let file = || -> Result<&Path, Failure> {
        let file = rest.first().ok_or_else(|| usage(format!("cache {action} needs a FILE")))?;
        takes(1)?;
        Ok(Path::new(file))
    };
    match action {
        "show" => {
            takes(0)?;
            show()
        }
        "clear" => {
            takes(0)?;
            let removed = disk_cache::prune(0)?;
            out!("removed  {removed} entries");
            Ok(true)
        }
        "prune" => {
            let size = rest.first().ok_or_else(|| {
                usage("cache prune needs a SIZE: the bytes to keep, such as 100M or 1GiB".into())
            })?;
            takes(1)?;
            let removed = disk_cache::prune(parse_size(size).map_err(usage)?)?;
            out!("removed  {removed} entries");
            show()
        }
        "verify" => {
            takes(0)?;
            let fix = args.has("--fix");
            let report = disk_cache::check(fix)?;
            let folder = disk_cache::dir();
            for p in &report.problems {
                out!("bad      {folder}/{}: {}", p.entry, p.problem);
            }
            out!("valid    {}", report.valid);
            out!("invalid  {}", report.invalid);
            if fix && report.invalid > 0 {
                out!("removed  {} bad entries", report.invalid);
            }
            Ok(fix || report.invalid == 0)
        }
        "export" => {
            let file = file()?;
            let manifest = args.get("--manifest").map(Path::new);
            let (exported, skipped) = if args.has("--with-sources") {
                let (exported, skipped, records) = disk_cache::export_with_sources(file, manifest)?;
                out!("records  {records} source records carried");
                (exported, skipped)
            } else {
                disk_cache::export(file, manifest)?
            };
            out!("exported {exported} entries to {}", file.display());
            if skipped > 0 {
                let why =
                    if manifest.is_some() { "named but not in the cache, or bad" } else { "bad" };
                out!("skipped  {skipped} ({why})");
            }
            Ok(skipped == 0)
        }
        "import" => {
            let r = disk_cache::import_with_sources(file()?)?;
            out!("imported {} entries into {}", r.imported, disk_cache::dir());
            if r.records > 0 {
                out!("records  {} source records into its sources/", r.records);
            }
            if r.skipped > 0 {
                out!("skipped  {} bad entries", r.skipped);
            }
            if r.refused > 0 {
                out!(
                    "refused  {} source records (each warned about; their entries imported)",
                    r.refused
                );
            }
            Ok(r.skipped == 0 && r.refused == 0)
        }
        "prewarm" => {
            let file = file()?;
            let device = device_or_default(args.get("--device"))?;
            let start = std::time::Instant::now();
            let r = disk_cache::prewarm(device, file)?;
            let ms = start.elapsed().as_secs_f64() * 1e3;
            let c = jitbridge::Counters::read();
            out!(
                "loaded   {} kernels for {} in {ms:.1} ms ({} compiles)",
                r.loaded,
                device.spec(),
                c.builds
            );
            out!("present  {}", r.present);
            out!(
                "missing  {} (in neither the cache folder nor a bundle: compiled at first use)",
                r.missing
            );
            out!("other    {} (for another device, compiler or library)", r.other);
            out!("failed   {}", r.failed);
            Ok(r.failed == 0)
        }
        "build" => {
            let file = file()?;
            let jobs = crate::cache_build::parse_jobs(args.get("--jobs")).map_err(usage)?;
            let device = device_or_default(args.get("--device"))?;
            crate::cache_build::build(file, device, jobs)
        }
        "remote" => crate::cache_remote::remote(rest),
        "coverage" => {
            let file = file()?;
            let device = args.get("--device").map(parse_device).transpose()?;
            let start = std::time::Instant::now();
            let coverage = disk_cache::coverage(device, file)?;
            let ms = start.elapsed().as_secs_f64() * 1e3;
            for k in &coverage.kernels {
                let why = if k.why.is_empty() { String::new() } else { format!(" ({})", k.why) };
                // Without --device, which of this host's devices each was checked on.
                let on = match device {
                    None if !k.device.is_empty() => format!(" on {}", k.device),
                    _ => String::new(),
                };
                out!("{:<8} {}{on}{why}", k.source.name(), k.module);
            }
            let count = |source| coverage.count(source);
            use disk_cache::CoverageSource::{Bundle, Compile, Disk, Memory, Other};
            let on = device.map_or("this host's devices".into(), |d| d.spec());
            let other = if device.is_some() { "for other devices" } else { "for no device here" };
            out!(
                "{} kernels for {on} checked in {ms:.1} ms: {} from the cache folder, {} from a \
                 bundle, {} in memory, {} would compile, {} {other}",
                coverage.kernels.len(),
                count(Disk),
                count(Bundle),
                count(Memory),
                count(Compile),
                count(Other)
            );
            Ok(!coverage.would_compile())
        }
        other => Err(usage(format!(
            "unknown cache action '{other}' (show, clear, prune SIZE, verify [--fix], export FILE, \
             import FILE, prewarm FILE, build MANIFEST, coverage MANIFEST or remote)"
        ))),
    }
}

/// Bytes in `text`: digits, then an optional K, M, G or T, alone or followed by B or iB, in
/// any case; all units are powers of 1024.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let unit = unit.to_ascii_lowercase();
    let power = match unit.as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 1,
        "m" | "mb" | "mib" => 2,
        "g" | "gb" | "gib" => 3,
        "t" | "tb" | "tib" => 4,
        _ => {
            return Err(format!(
                "'{text}' is not a size: a whole number with an optional unit K, M, G or T \
                 (100M, 100MB, 1G, 1GiB)"
            ));
        }
    };
    if digits.is_empty() {
        return Err(format!("'{text}' is not a size: it needs a number (100M, 1GiB)"));
    }
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << (10 * power)))
        .ok_or_else(|| format!("'{text}' is too large a size (at most 16 EiB - 1 byte)"))
}

#[cfg(test)]
mod tests {
    use super::{parse_size, readable_bytes};

    #[test]
    fn bytes_read_as_kib_and_mib() {
        assert_eq!(readable_bytes(0), "0 bytes");
        assert_eq!(readable_bytes(1023), "1023 bytes");
        assert_eq!(readable_bytes(16000), "15.6 KiB (16000 bytes)");
        assert_eq!(readable_bytes(3 << 20), "3.0 MiB (3145728 bytes)");
        assert_eq!(readable_bytes(5 << 30), "5.0 GiB (5368709120 bytes)");
    }

    #[test]
    fn sizes_take_every_spelling_of_a_unit() {
        let mib = 1u64 << 20;
        for text in ["100M", "100m", "100MB", "100mb", "100MiB", "100mib"] {
            assert_eq!(parse_size(text), Ok(100 * mib), "{text}");
        }
        for text in ["1G", "1GB", "1GiB", "1g"] {
            assert_eq!(parse_size(text), Ok(1 << 30), "{text}");
        }
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4096B"), Ok(4096));
        assert_eq!(parse_size("2K"), Ok(2048));
        assert_eq!(parse_size("0"), Ok(0));
    }

    #[test]
    fn bad_sizes_are_refused_with_a_reason() {
        for text in ["", "M", "1.5G", "-1M", "10X", "10MBB", " 10M"] {
            let error = parse_size(text).expect_err(text);
            assert!(error.contains("is not a size"), "{text}: {error}");
        }
        assert!(parse_size("16777216T").unwrap_err().contains("too large"));
        assert!(parse_size("99999999999999999999").unwrap_err().contains("too large"));
    }
}
