//! JITBRIDGE_MANIFEST=FILE: every process appends one line per kernel it built or loaded. Each
//! test re-runs this test binary as a child (the `child_entry` test, inert unless
//! JB_MANIFEST_TEST_CHILD is set) with its own cache folder and manifest.

mod common;

use jitbridge::{Array, Counters, CustomKernel, DType, Device, LaunchShape};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const CHILD: &str = "JB_MANIFEST_TEST_CHILD";

fn salted_kernel(salt: u32) -> CustomKernel {
    common::salted_kernel("manifested", 5, salt)
}

/// In the child: launch each salt of the comma-separated list, then print the counters.
#[test]
fn child_entry() {
    let Ok(salts) = std::env::var(CHILD) else { return };
    let input = Array::arange(Device::cpu().unwrap(), 32, DType::F32).unwrap();
    let mut exact = true;
    for salt in salts.split(',').filter(|s| !s.is_empty()).map(|s| s.parse::<u32>().unwrap()) {
        // SAFETY: 32 threads, each its own element of two 32-element arrays.
        let out = unsafe {
            salted_kernel(salt).launch_unchecked(&[&input], &[&[32]], LaunchShape::Threads(32))
        };
        let values = out.unwrap()[0].to_vec::<f32>().unwrap();
        exact &= values.iter().enumerate().all(|(i, &v)| v == i as f32 * 5.0 + salt as f32);
    }
    let c = Counters::read();
    println!("RESULT builds={} disk_hits={} exact={exact}", c.builds, c.disk_hits);
    // The records the manifest names, checked in this process (whose cache folder they are in).
    let manifest = std::env::var_os("JITBRIDGE_MANIFEST").unwrap();
    match jitbridge::disk_cache::check_sources(Path::new(&manifest)) {
        Ok((checked, keyed)) => println!("SOURCES checked={checked} keyed={keyed}"),
        Err(e) => println!("SOURCES refused {:?}: {}", e.code(), e.message()),
    }
}

fn child(cache: &Path, manifest: &Path, salts: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD, salts)
        .env("JITBRIDGE_CACHE_DIR", cache)
        .env("JITBRIDGE_MANIFEST", manifest)
        .env_remove("JITBRIDGE_DISK_CACHE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The child's (builds, disk hits) and its stderr; it must have succeeded with exact outputs.
fn finished(output: Output) -> ((u64, u64), String) {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "child failed: {stdout}\n{stderr}");
    let line = stdout.lines().find_map(|l| l.find("RESULT ").map(|at| &l[at..])).unwrap();
    assert!(line.ends_with("exact=true"), "{line}");
    let number = |name: &str| -> u64 {
        let field = line.split_whitespace().find_map(|kv| kv.strip_prefix(name)).unwrap();
        field.parse().unwrap()
    };
    ((number("builds="), number("disk_hits=")), stderr)
}

fn run(cache: &Path, manifest: &Path, salts: &str) -> ((u64, u64), String) {
    run_with_sources(cache, manifest, salts).0
}

/// As `run`, with the child's line about the manifest's source records.
fn run_with_sources(cache: &Path, manifest: &Path, salts: &str) -> (((u64, u64), String), String) {
    let output = common::finish(child(cache, manifest, salts), Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let sources = stdout.lines().find_map(|l| l.find("SOURCES ").map(|at| l[at..].to_string()));
    (finished(output), sources.unwrap_or_default())
}

fn is_root() -> bool {
    unsafe extern "C" {
        fn geteuid() -> u32;
    }
    // SAFETY: geteuid has no preconditions.
    unsafe { geteuid() == 0 }
}

fn fresh(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("jb-manifest-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One parsed line: (key, backend, target, module, entries, how, the source record it names).
#[derive(Debug, Clone, PartialEq)]
struct Line {
    key: String,
    backend: String,
    target: String,
    module: String,
    entries: String,
    how: String,
    source: Option<String>,
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Every line of the manifest, each checked to be a whole, well-formed jbm1 line.
fn lines(manifest: &Path) -> Vec<Line> {
    let text = std::fs::read_to_string(manifest).unwrap();
    assert!(text.is_empty() || text.ends_with('\n'), "the last line is cut: {text:?}");
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            // An eighth, "source=<64 hex>", names the kernel's source record.
            assert!(f.len() == 7 || f.len() == 8, "not 7 or 8 fields: {l:?}");
            let source = f.get(7).map(|s| s.strip_prefix("source=").expect(l).to_string());
            assert!(source.iter().all(|s| s.len() == 64 && is_lower_hex(s)), "{l:?}");
            assert_eq!(f[0], "jbm1", "{l:?}");
            assert!(f[1].len() == 64 && f[1].bytes().all(|b| b.is_ascii_hexdigit()), "{l:?}");
            assert!(!f[1].bytes().any(|b| b.is_ascii_uppercase()), "{l:?}");
            Line {
                key: f[1].into(),
                backend: f[2].into(),
                target: f[3].into(),
                module: f[4].into(),
                entries: f[5].into(),
                how: f[6].into(),
                source,
            }
        })
        .collect()
}

#[test]
fn each_kernel_gets_one_line_per_process_naming_its_entry() {
    let dir = fresh("lines");
    let (cache, manifest) = (dir.join("cache"), dir.join("kernels.manifest"));
    assert_eq!(run(&cache, &manifest, "1,2,1").0, (2, 0));
    let first = lines(&manifest);
    assert_eq!(first.len(), 2, "{first:?}");
    for line in &first {
        assert_eq!((line.backend.as_str(), line.how.as_str()), ("cpu", "compiled"));
        assert_eq!(line.target, Device::cpu().unwrap().arch());
        assert!(line.module.starts_with("manifested_"), "{line:?}");
        assert_eq!(line.entries, "manifested");
        // The key names the disk cache entry: its first 32 hex digits.
        assert!(cache.join(format!("{}.jbc", &line.key[..32])).is_file(), "{line:?}");
        // And it names the source record that rebuilds it, kept beside the entries.
        let record = cache.join("sources").join(format!("{}.jbs", line.source.as_ref().unwrap()));
        let text = std::fs::read_to_string(&record).unwrap();
        assert!(text.starts_with("jbs1\nbackend cpu\ndialect c\n"), "{text}");
        assert!(text.contains(&format!("\nmodule {}\nentry manifested\n", line.module)));
    }
    assert_ne!(first[0].key, first[1].key);
    let (counts, sources) = run_with_sources(&cache, &manifest, "2,3,1");
    assert_eq!(counts.0, (1, 2));
    // The record of each of the 5 lines (3 kernels) passes and makes its line's key again.
    assert_eq!(sources, "SOURCES checked=5 keyed=5");
    let all = lines(&manifest);
    assert_eq!(all.len(), 5, "{all:?}");
    let how: Vec<&str> = all[2..].iter().map(|l| l.how.as_str()).collect();
    assert_eq!(how, ["disk", "compiled", "disk"]);
    // One kernel, one key, whichever process wrote it.
    assert_eq!(all[2].key, first[1].key);
    assert_eq!(all[4].key, first[0].key);
    // A record is named by its content: a kernel loaded from the disk names the same one.
    assert_eq!(all[2].source, first[1].source);
    assert_eq!(all[4].source, first[0].source);
    // A record changed after it was written no longer hashes to its name: refused, left there.
    let record = cache.join("sources").join(format!("{}.jbs", first[0].source.as_ref().unwrap()));
    let mut text = std::fs::read(&record).unwrap();
    text.push(b' ');
    std::fs::write(&record, &text).unwrap();
    let (_, sources) = run_with_sources(&cache, &manifest, "");
    assert!(sources.starts_with("SOURCES refused InvalidArgument: "), "{sources}");
    assert!(sources.contains("does not hash to its name"), "{sources}");
    assert_eq!(std::fs::read(&record).unwrap(), text);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A writer whose disk filled up left its last line cut: the next process's line is written on
/// a line of its own, not glued to the cut one (a reader would skip both).
#[test]
fn a_line_left_cut_is_ended_before_the_next() {
    use std::os::unix::fs::PermissionsExt;
    let dir = fresh("cut");
    let (cache, manifest) = (dir.join("cache"), dir.join("kernels.manifest"));
    let cut = "jbm1\t0123456789abcdef";
    std::fs::write(&manifest, cut).unwrap();
    std::fs::set_permissions(&manifest, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(run(&cache, &manifest, "7").0, (1, 0));
    let text = std::fs::read_to_string(&manifest).unwrap();
    let (first, rest) = text.split_once('\n').unwrap_or_else(|| panic!("one line: {text:?}"));
    assert_eq!(first, cut, "{text:?}");
    std::fs::write(&manifest, rest).unwrap();
    let after = lines(&manifest);
    assert_eq!(after.len(), 1, "{text:?}");
    assert_eq!((after[0].how.as_str(), after[0].entries.as_str()), ("compiled", "manifested"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Eight processes append at once: every line whole, none lost.
#[test]
fn processes_appending_together_write_whole_lines() {
    let dir = fresh("together");
    let (cache, manifest) = (dir.join("cache"), dir.join("kernels.manifest"));
    let salts: Vec<String> = (100..124).map(|s| s.to_string()).collect();
    let salts = salts.join(",");
    assert_eq!(run(&cache, &manifest, &salts).0, (24, 0));
    let children: Vec<_> = (0..8)
        .map(|_| {
            let mut cmd = child(&cache, &manifest, &salts);
            cmd.stdin(Stdio::null()).spawn().unwrap()
        })
        .collect();
    for c in children {
        assert_eq!(finished(c.wait_with_output().unwrap()).0, (0, 24));
    }
    let all = lines(&manifest);
    assert_eq!(all.len(), 24 * 9);
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for line in &all {
        *per_key.entry(line.key.clone()).or_default() += 1;
    }
    assert_eq!(per_key.len(), 24);
    assert!(per_key.values().all(|&n| n == 9), "{per_key:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes nothing where it must not: a link, a FIFO (without blocking), a file others may
/// write, another user's file. Each is one warning; the kernels still run.
#[test]
fn a_manifest_that_is_not_a_file_of_ours_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = fresh("refused");
    let cache = dir.join("cache");
    let target = dir.join("target");
    std::fs::write(&target, b"").unwrap();
    let link = dir.join("link.manifest");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let fifo = dir.join("fifo.manifest");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    unsafe extern "C" {
        fn mkfifo(path: *const std::ffi::c_char, mode: u32) -> i32;
    }
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let open = dir.join("open.manifest");
    std::fs::write(&open, b"").unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut cases = vec![(link, "link"), (fifo, "fifo"), (open.clone(), "group or others")];
    let theirs = dir.join("theirs.manifest");
    if is_root() {
        std::fs::write(&theirs, b"").unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        cases.push((theirs.clone(), "another user"));
    }
    for (path, what) in &cases {
        let (_, stderr) = run(&cache, path, "7");
        assert!(stderr.contains("JITBRIDGE_MANIFEST"), "{what}: no warning: {stderr}");
        assert_eq!(stderr.matches("warning").count(), 1, "{what}: {stderr}");
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"", "written through the link");
    assert_eq!(std::fs::read(&open).unwrap(), b"", "written to a file others may write");
    if is_root() {
        assert_eq!(std::fs::read(&theirs).unwrap(), b"", "written to another user's file");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
