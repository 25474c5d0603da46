//! The `jitbridge` command: runs the race-probe scenario and reports, or prints what it sees.

use std::io::{self, IsTerminal, Write};

/// Prints a line on stdout. A reader that went away (`jitbridge info | head -1`) ends the
/// command quietly with status 0; any other write failure is an error.
macro_rules! out {
    () => { $crate::write_line(format_args!("")) };
    ($($arg:tt)*) => { $crate::write_line(format_args!($($arg)*)) };
}

/// Prints a line on stderr, ignoring a closed stderr: a note is never worth a panic.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod bench;
mod soak;

use jitbridge::{Counters, Device, race};
use std::process::ExitCode;
use std::time::Instant;

fn write_line(args: std::fmt::Arguments<'_>) {
    let mut stdout = io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.write_all(b"\n")) {
        if e.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        note!("jitbridge: cannot write the output: {e}");
        std::process::exit(2);
    }
}

/// Most threads `run --threads` starts per round; each also starts a stream worker on the cpu.
const MAX_THREADS: u64 = 1024;
/// Most rounds `run --rounds` takes: each round's variant is a new kernel.
const MAX_ROUNDS: u64 = 100_000;

/// A command's help: its usage line, what it does in a line, and the details.
struct Command {
    name: &'static str,
    usage: &'static str,
    about: &'static str,
    details: &'static str,
}

const RUN: Command = Command {
    name: "run",
    usage: "jitbridge run [--threads N] [--rounds N] [--device cpu|gpu|cuda|rocm[:N]]",
    about: "first-launch new probe kernels from many threads at once and check every output",
    details: "Each round, N threads each install their own stream, meet at a barrier and launch a
probe kernel no earlier round built; then the builds, hits, misses and timings are reported.
`jitbridge` with no command, or with only these options, runs this.

options:
  --threads N   threads per round, 1 to 1024 (default 8)
  --rounds N    rounds, 1 to 100000 (default 16)
  --device D    cpu, cuda:N, rocm:N, or gpu:N (GPU N of the first GPU backend that has
                devices); N defaults to 0 (default: gpu:0 when a GPU is present, else cpu)

Progress goes to stderr: one updating line on a terminal, plain lines otherwise.
exit status: 0 when every output was exact and each round built once, 1 when not, 2 on an error",
};

const BENCH: Command = Command {
    name: "bench",
    usage: "jitbridge bench [--json] [--quick] [--device cpu|gpu|cuda|rocm[:N]]",
    about: "measure the launch path's costs, each against its baseline",
    details: "Measures, in one run: hit lookups (lookaside vs the plain locked protocol) at 1-16
threads, hit latency while other threads build, the probe launch path vs a raw launch, a cold
first launch vs the compiler alone, and a new process's first launch with and without a disk
cache entry. Each row with a target says whether this run met it, and which hardware the target
was set for (the H200 host); on other hardware the row is judged against it all the same.

options:
  --json        one JSON object on stdout instead of the table: per row section, measure,
                value, unit, baseline, ratio (numbers, or null), target (null, or text,
                max_value, max_ratio and hardware) and met (true, false, or null without a target)
  --quick       every measure once and small, in seconds: shows the bench works; its numbers
                are not comparable
  --device D    cpu, gpu, cuda or rocm, with an optional :N (default: as for run)",
};

const SOAK: Command = Command {
    name: "soak",
    usage: "jitbridge soak [--seconds N] [--json] [--device cpu|gpu|cuda|rocm[:N]] [--workers LIST]
                      [--decode library|raw]",
    about: "live like a server for a while: checks every output, memory and decode latency",
    details: "A decode loop launches a warm kernel on its own stream; embedding and rerank workers
first-launch a new kernel (a new shape or variant) every 250 ms and launch their recent ones on
batches of varying sizes; two threads share one stream; a batch worker keeps arrays of 4 KiB to
4 MiB alive and frees them; midway a forked child compiles a kernel on the cpu and exits.
Every output is read back and checked exactly. Phases: decode alone (warm-up, then measured),
with the others (warm-up, then measured), decode alone again (measured).

Printed: decode-step p50/p99/max alone and with the others, for the whole step and for its two
parts (the launch: until the launch call returns; the wait: until the output is done), the steps
slower than the alone p99 (the first alone phase's, fixed as the others start) in the second
alone phase and with the others, and for those which part exceeded its alone p50 by more;
reserved vs peak live device bytes over
time, RSS growth after warm-up (/proc/self/statm), builds and hits, and whether each target was
met: every output exact; decode p99 with the others at most 1.1x alone; reserved at most 1.25x
peak live; RSS growth after warm-up under 1%.

RSS growth is measured from the RSS floor (least RSS sampled) of the third quarter of the phase
with the others to that of its last quarter, less the modules loaded meanwhile at their measured
RSS (the cache keeps every module by design). The first half of that phase is the allocator's
warm-up: glibc's per-thread arenas and first-touched code pages rise to a high-water mark that
plateaus, while heap bytes in use stay flat (JITBRIDGE_SOAK_MALLINFO=1 prints glibc's mallinfo2
at each sample on stderr); a leak keeps raising the floor in the second half too. The fork comes
in the first half as well: it raises the parent's RSS once, which is no growth.

The workers' kernels are the same in every run (a second run may load them from the disk
cache); the child's is new in each run.

To attribute the decode p99 with the others, run one soak per worker (--workers embed, then
rerank, ...) and one with --workers none; and each again with --decode raw: a p99 that rises
under --decode raw as well comes from the driver or the device, not from jitbridge's path.

options:
  --seconds N   how long, 1 to 86400 (default 30)
  --json        one JSON object on stdout instead of the table
  --device D    cpu, gpu, cuda or rocm, with an optional :N (default: as for run)
  --workers L   the other workers that run beside decode: a comma list of embed (first-launch
                worker), rerank (another), shared (two threads sharing one stream), batch
                (arrays of varying sizes), fork (a child that compiles and exits); or all (the
                default) or none (decode alone throughout). The report names those that ran;
                the targets are judged all the same
  --decode M    library (the default): each step is launch_with_scalars, then eval;
                raw: the control, each step only the backend's launch + event record, then the
                event's wait, of a launch the library staged once into one fixed output (no
                lookup, array, hold or allocation); every output is still checked exactly

exit status: 0 when every output was exact and the memory targets (reserved, RSS) were met,
1 when not (the latency target is printed, never judged here: it depends on the host's load),
2 on an error",
};

const CACHE: Command = Command {
    name: "cache",
    usage: "jitbridge cache [show | clear | prune SIZE | verify [--fix]]",
    about: "show or maintain the disk cache of compiled code",
    details:
        "  show          the folder, its state, entries and size (the default); creates nothing
  clear         remove every entry
  prune SIZE    remove the oldest entries until at most SIZE bytes remain
  verify        check every entry as the library would before loading it (type, owner, mode,
                links, size, contents) and name each bad one (exit status 1 if any)
  verify --fix  the same, removing each bad entry

Each action applies the library's trust rules: on a folder it would refuse (owned by another
user, writable by group or others, or under a parent others can write) it fails, naming the
folder and the fix. A failure to remove an entry is an error (exit status 2).

SIZE is a whole number of bytes with an optional unit K, M, G or T, alone or followed by B or
iB, in any case; units are powers of 1024 (100M, 100MB and 100MiB are all 104857600 bytes).",
};

const INFO: Command = Command {
    name: "info",
    usage: "jitbridge info",
    about: "print the backend, the devices, the compiler, the disk cache and the counters",
    details: "",
};

const HELP: Command = Command {
    name: "help",
    usage: "jitbridge help [COMMAND]",
    about: "print this help, or a command's",
    details: "",
};

const COMMANDS: [&Command; 6] = [&RUN, &BENCH, &SOAK, &CACHE, &INFO, &HELP];

fn command(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().copied().find(|c| c.name == name)
}

fn print_overview() {
    out!("jitbridge {}: run-time compiled kernels behind a locked module cache", VERSION);
    out!();
    out!("usage: jitbridge [COMMAND] [OPTIONS]");
    out!();
    out!("commands:");
    for c in COMMANDS {
        out!("  {:<7} {}", c.name, c.about);
    }
    out!();
    out!("`jitbridge help COMMAND` or `jitbridge COMMAND --help` shows a command's options;");
    out!("`jitbridge --version` prints the version. Without a command, `run` runs.");
}

fn print_help(c: &Command) {
    out!("usage: {}", c.usage);
    out!();
    out!("{}", c.about);
    if !c.details.is_empty() {
        out!();
        out!("{}", c.details);
    }
}

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// How a command ends: `Ok(true)` success, `Ok(false)` a check failed (status 1).
enum Failure {
    /// Bad arguments: the message, and the command whose usage to show.
    Usage(String, &'static Command),
    /// The command could not do its work.
    Error(String),
}

impl From<jitbridge::Error> for Failure {
    fn from(e: jitbridge::Error) -> Self {
        Failure::Error(e.to_string())
    }
}

type Outcome = Result<bool, Failure>;

/// An option a command takes: its flag, and for one that takes a value, what the value is.
struct Opt {
    flag: &'static str,
    value: Option<&'static str>,
}

const DEVICE_OPT: Opt =
    Opt { flag: "--device", value: Some("a device: cpu, gpu, cuda or rocm, with an optional :N") };

/// A command's arguments, checked against its options. `None` when help was asked for.
struct Args {
    options: Vec<(&'static str, String)>,
    positional: Vec<String>,
}

impl Args {
    fn get(&self, flag: &str) -> Option<&str> {
        self.options.iter().rev().find(|(f, _)| *f == flag).map(|(_, v)| v.as_str())
    }
    fn has(&self, flag: &str) -> bool {
        self.options.iter().any(|(f, _)| *f == flag)
    }
}

fn parse_args(c: &'static Command, args: &[String], opts: &[Opt]) -> Result<Option<Args>, Failure> {
    let usage = |message: String| Failure::Usage(message, c);
    let mut parsed = Args { options: Vec::new(), positional: Vec::new() };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--help" || arg == "-h" {
            return Ok(None);
        }
        if !arg.starts_with('-') || arg == "-" {
            parsed.positional.push(arg.clone());
            continue;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag, Some(value.to_string())),
            None => (arg.as_str(), None),
        };
        let opt = opts
            .iter()
            .find(|o| o.flag == flag)
            .ok_or_else(|| usage(format!("unknown option '{flag}' for `jitbridge {}`", c.name)))?;
        let value = match (opt.value, inline) {
            (None, None) => String::new(),
            (None, Some(_)) => return Err(usage(format!("{flag} takes no value"))),
            (Some(_), Some(value)) => value,
            (Some(what), None) => {
                it.next().cloned().ok_or_else(|| usage(format!("{flag} needs a value: {what}")))?
            }
        };
        parsed.options.push((opt.flag, value));
    }
    Ok(Some(parsed))
}

fn no_positional(c: &'static Command, args: &Args) -> Result<(), Failure> {
    match args.positional.first() {
        None => Ok(()),
        Some(extra) => Err(Failure::Usage(format!("unexpected argument '{extra}'"), c)),
    }
}

/// A whole number from 1 to `max` for `flag`.
fn parse_count(flag: &str, text: &str, max: u64) -> Result<usize, String> {
    let range = format!("{flag} takes a whole number from 1 to {max}");
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{range}, not '{text}'"));
    }
    match text.parse::<u64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n as usize),
        _ => Err(format!("{range}; {text} is out of range")),
    }
}

/// Bytes in `text`: digits, then an optional K, M, G or T, alone or followed by B or iB, in
/// any case; all units are powers of 1024.
fn parse_size(text: &str) -> Result<u64, String> {
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

/// `cpu`, `gpu`, `cuda`, `rocm`, each with an optional `:N` (see `Device::lookup`).
fn parse_device(spec: &str) -> Result<Device, Failure> {
    Ok(Device::lookup(spec)?)
}

fn device_or_default(spec: Option<&str>) -> Result<Device, Failure> {
    match spec {
        Some(spec) => parse_device(spec),
        None => Ok(Device::default_device()?),
    }
}

struct RunOptions {
    threads: usize,
    rounds: usize,
    device: Option<String>,
}

fn run_command(args: &[String]) -> Outcome {
    let opts = [
        Opt { flag: "--threads", value: Some("the number of threads per round, 1 to 1024") },
        Opt { flag: "--rounds", value: Some("the number of rounds, 1 to 100000") },
        DEVICE_OPT,
    ];
    let Some(args) = parse_args(&RUN, args, &opts)? else {
        print_help(&RUN);
        return Ok(true);
    };
    no_positional(&RUN, &args)?;
    let usage = |message| Failure::Usage(message, &RUN);
    let mut options = RunOptions { threads: 8, rounds: 16, device: None };
    if let Some(text) = args.get("--threads") {
        options.threads = parse_count("--threads", text, MAX_THREADS).map_err(usage)?;
    }
    if let Some(text) = args.get("--rounds") {
        options.rounds = parse_count("--rounds", text, MAX_ROUNDS).map_err(usage)?;
    }
    options.device = args.get("--device").map(str::to_string);
    run(options)
}

/// Shows "round i/n" on stderr: redrawn in place on a terminal, one plain line each otherwise.
struct Progress {
    terminal: bool,
}

impl Progress {
    fn new() -> Self {
        Progress { terminal: io::stderr().is_terminal() }
    }
    fn round(&self, done: usize, total: usize) {
        if self.terminal {
            let _ = write!(io::stderr(), "\rround {done}/{total}");
        } else {
            note!("round {done}/{total}");
        }
    }
    fn finish(&self) {
        if self.terminal {
            note!();
        }
    }
}

fn run(options: RunOptions) -> Outcome {
    let device = device_or_default(options.device.as_deref())?;
    let before = Counters::read();
    let start = Instant::now();
    let mut all_exact = true;
    let mut failures = Vec::new();
    let progress = (options.rounds >= 4).then(Progress::new);
    for round in 0..options.rounds {
        // Every round first-launches a variant no earlier round built.
        let variant = round as i32;
        let variants = vec![variant; options.threads];
        let outcomes = race::first_launch_round(device, jitbridge::jit_race_probe_array, &variants);
        let outcomes = match outcomes {
            Ok(outcomes) => outcomes,
            Err(e) => {
                if let Some(p) = &progress {
                    p.finish();
                }
                return Err(e.into());
            }
        };
        for outcome in outcomes {
            match outcome {
                Ok(true) => {}
                Ok(false) => all_exact = false,
                Err(e) => {
                    all_exact = false;
                    failures.push(e.to_string());
                }
            }
        }
        if let Some(p) = &progress {
            p.round(round + 1, options.rounds);
        }
    }
    if let Some(p) = &progress {
        p.finish();
    }
    let elapsed = start.elapsed();
    let delta = Counters::read().since(&before);
    let (cold, cached) = probe_launch_times(device)?;
    out!("backend      {}", device.backend());
    out!("device       {} ({}, index {})", device.name(), device.arch(), device.index());
    out!("rounds       {}", options.rounds);
    out!("threads      {}", options.threads);
    out!("builds       {} (expected {})", delta.builds, options.rounds);
    out!("hits         {}", delta.hits);
    out!("misses       {}", delta.misses);
    out!("build time   {:.1} ms", delta.build_ns as f64 / 1e6);
    out!("exact        {}", if all_exact { "yes, every output" } else { "NO" });
    out!("time         {:.1} ms", elapsed.as_secs_f64() * 1e3);
    out!("first launch {:.2} ms (cold: build and launch of a new probe, one thread)", cold * 1e3);
    out!(
        "cached       {:.2} us per probe launch (warm module, {CACHED_LAUNCHES} launches)",
        cached * 1e6
    );
    for failure in failures.iter().take(5) {
        out!("error        {failure}");
    }
    Ok(all_exact && delta.builds == options.rounds as u64)
}

const CACHED_LAUNCHES: u32 = 2000;

/// Seconds for one cold first launch (build included) and per warm launch of the probe.
fn probe_launch_times(device: Device) -> Result<(f64, f64), jitbridge::Error> {
    let input = jitbridge::Array::arange(device, race::PROBE_ELEMENTS, jitbridge::DType::F32)?;
    // A variant no round used: its first launch builds.
    let variant = i32::MAX - 1;
    let start = Instant::now();
    jitbridge::jit_race_probe_array(&input, variant)?.eval()?;
    let cold = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let mut last = None;
    for _ in 0..CACHED_LAUNCHES {
        last = Some(jitbridge::jit_race_probe_array(&input, variant)?);
    }
    if let Some(last) = last {
        last.eval()?;
    }
    Ok((cold, start.elapsed().as_secs_f64() / f64::from(CACHED_LAUNCHES)))
}

fn bench_command(args: &[String]) -> Outcome {
    let opts =
        [Opt { flag: "--json", value: None }, Opt { flag: "--quick", value: None }, DEVICE_OPT];
    let Some(args) = parse_args(&BENCH, args, &opts)? else {
        print_help(&BENCH);
        return Ok(true);
    };
    no_positional(&BENCH, &args)?;
    let device = device_or_default(args.get("--device"))?;
    let scale = if args.has("--quick") { &bench::Scale::QUICK } else { &bench::Scale::FULL };
    let rows = bench::run(device, scale)?;
    if args.has("--json") {
        bench::print_json(device, scale, &rows);
    } else {
        bench::print_table(device, scale, &rows);
    }
    Ok(true)
}

/// Most seconds `soak --seconds` takes: a day.
const MAX_SOAK_SECONDS: u64 = 86_400;

fn soak_command(args: &[String]) -> Outcome {
    let opts = [
        Opt { flag: "--seconds", value: Some("how long to run, 1 to 86400 seconds") },
        Opt { flag: "--json", value: None },
        DEVICE_OPT,
        Opt {
            flag: "--workers",
            value: Some("a comma list of embed, rerank, shared, batch, fork; or all, or none"),
        },
        Opt { flag: "--decode", value: Some("library or raw") },
    ];
    let Some(args) = parse_args(&SOAK, args, &opts)? else {
        print_help(&SOAK);
        return Ok(true);
    };
    no_positional(&SOAK, &args)?;
    let usage = |message| Failure::Usage(message, &SOAK);
    let seconds = match args.get("--seconds") {
        Some(text) => parse_count("--seconds", text, MAX_SOAK_SECONDS).map_err(usage)?,
        None => 30,
    };
    let workers = match args.get("--workers") {
        Some(text) => soak::Workers::parse(text).map_err(usage)?,
        None => soak::Workers::ALL,
    };
    let mode = match args.get("--decode") {
        Some(text) => soak::DecodeMode::parse(text).map_err(usage)?,
        None => soak::DecodeMode::Library,
    };
    let device = device_or_default(args.get("--device"))?;
    let report = soak::run(device, seconds as f64, workers, mode)?;
    if args.has("--json") {
        soak::print_json(device, &report);
    } else {
        soak::print_table(device, &report);
    }
    Ok(report.passed())
}

/// Bytes as a person reads them, exact in parentheses: "512 bytes", "15.6 KiB (16000 bytes)".
fn readable_bytes(bytes: u64) -> String {
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

fn cache_command(args: &[String]) -> Outcome {
    use jitbridge::disk_cache;
    let Some(args) = parse_args(&CACHE, args, &[Opt { flag: "--fix", value: None }])? else {
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
    if args.has("--fix") && action != "verify" {
        return Err(usage(format!("--fix belongs to `cache verify`, not `cache {action}`")));
    }
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
        other => Err(usage(format!(
            "unknown cache action '{other}' (show, clear, prune SIZE or verify [--fix])"
        ))),
    }
}

/// For `jitbridge bench`: in a fresh process, time the first launch of a fixed kernel (the
/// device already opened) and print it with the counters.
fn first_launch(args: &[String]) -> Outcome {
    const HIDDEN: Command = Command {
        name: "__first-launch",
        usage: "jitbridge __first-launch [cpu|gpu|cuda|rocm[:N]] [SALT]",
        about: "(internal, for bench) time one first launch in this process",
        details: "",
    };
    let Some(args) = parse_args(&HIDDEN, args, &[])? else {
        print_help(&HIDDEN);
        return Ok(true);
    };
    if let Some(extra) = args.positional.get(2) {
        return Err(Failure::Usage(format!("unexpected argument '{extra}'"), &HIDDEN));
    }
    let device = device_or_default(args.positional.first().map(String::as_str))?;
    // A salt makes the source one no process compiled before (NVRTC's compute cache misses).
    let body = match args.positional.get(1) {
        Some(salt) => format!("{} /* {salt} */", race::probe_body()),
        None => race::probe_body().to_string(),
    };
    let input = jitbridge::Array::arange(device, 256, jitbridge::DType::F32)?;
    input.eval()?;
    let kernel = jitbridge::CustomKernel::new(&jitbridge::KernelSpec {
        name: "bench_first_launch",
        inputs: &[("inp", jitbridge::DType::F32)],
        outputs: &[("out", jitbridge::DType::F32)],
        body: &body,
        ..Default::default()
    })?;
    let start = Instant::now();
    let out = kernel.launch(&[&input], &[&[256]], jitbridge::LaunchShape::Threads(256))?;
    out[0].eval()?;
    let ns = start.elapsed().as_nanos();
    let exact = race::probe_output_exact(&out[0].to_vec::<f32>()?);
    let c = Counters::read();
    out!("first_launch_ns={ns} builds={} disk_hits={} exact={exact}", c.builds, c.disk_hits);
    Ok(exact)
}

fn info_command(args: &[String]) -> Outcome {
    let Some(args) = parse_args(&INFO, args, &[])? else {
        print_help(&INFO);
        return Ok(true);
    };
    no_positional(&INFO, &args)?;
    info()?;
    Ok(true)
}

fn info() -> Result<(), Failure> {
    out!("jitbridge {VERSION}");
    out!("gpu backend  {}", jitbridge::gpu_backend());
    out!("cpu compiler {}", jitbridge::cpu_compiler());
    for backend in jitbridge::gpu_backends() {
        out!("{:<12} {}", backend.name, backend.state());
    }
    for device in Device::all()? {
        out!(
            "device {:<5} {:<7} {} ({}), {:.1} GiB",
            device.index(),
            device.spec(),
            device.name(),
            device.arch(),
            device.total_memory() as f64 / (1u64 << 30) as f64
        );
    }
    out!("disk cache   {} ({})", jitbridge::disk_cache::dir(), jitbridge::disk_cache::state());
    let c = Counters::read();
    out!(
        "counters     builds {} failures {} hits {} misses {} configures {} build time {:.1} ms",
        c.builds,
        c.build_failures,
        c.hits,
        c.misses,
        c.configures,
        c.build_ns as f64 / 1e6
    );
    let mib = |bytes: u64| bytes as f64 / (1u64 << 20) as f64;
    let caps: Vec<String> = Device::all()?
        .iter()
        .map(|d| format!("{} {:.1} MiB", d.index(), mib(d.idle_cap())))
        .collect();
    out!(
        "memory       live {:.1} MiB (peak {:.1}) reserved {:.1} idle {:.1} (cap per device {}) \
         allocations {} frees {} reuses {} retries {}",
        mib(c.mem_live_bytes),
        mib(c.mem_peak_live_bytes),
        mib(c.mem_reserved_bytes),
        mib(c.mem_idle_bytes),
        caps.join(", "),
        c.mem_allocations,
        c.mem_frees,
        c.mem_reuses,
        c.mem_retries
    );
    for device in Device::all()? {
        let s = device.memory_stats();
        out!(
            "  on {:<9} live {:.1} MiB (peak {:.1}) reserved {:.1} idle {:.1} \
             allocations {} frees {} reuses {} retries {}",
            device.spec(),
            mib(s.live_bytes),
            mib(s.peak_live_bytes),
            mib(s.reserved_bytes),
            mib(s.idle_bytes),
            s.allocations,
            s.frees,
            s.reuses,
            s.retries
        );
    }
    if race::removed_locks() != 0 {
        out!("WARNING      test-only build without locks (mask {})", race::removed_locks());
    }
    Ok(())
}

fn help_command(args: &[String]) -> Outcome {
    match args {
        [] => print_overview(),
        [name] if name == "--help" || name == "-h" => print_help(&HELP),
        [name] => match command(name) {
            Some(c) => print_help(c),
            None => {
                return Err(Failure::Usage(
                    format!("no command '{name}' (run, bench, soak, cache, info, help)"),
                    &HELP,
                ));
            }
        },
        [_, extra, ..] => {
            return Err(Failure::Usage(format!("unexpected argument '{extra}'"), &HELP));
        }
    }
    Ok(true)
}

/// The arguments as text; one that is not UTF-8 (no option, device or size is) is a usage error,
/// never a panic.
fn text_args() -> Result<Vec<String>, Failure> {
    std::env::args_os()
        .skip(1)
        .map(|arg| {
            arg.into_string().map_err(|arg| {
                Failure::Usage(format!("argument {arg:?} is not valid UTF-8"), &HELP)
            })
        })
        .collect()
}

fn dispatch(args: &[String]) -> Outcome {
    let rest = args.get(1..).unwrap_or(&[]);
    match args.first().map(String::as_str) {
        Some("--version" | "-V") if rest.is_empty() => {
            out!("jitbridge {VERSION}");
            Ok(true)
        }
        Some("--version" | "-V") => {
            Err(Failure::Usage("--version takes no arguments".into(), &HELP))
        }
        Some("--help" | "-h") => help_command(rest),
        Some("help") => help_command(rest),
        Some("run") => run_command(rest),
        Some("bench") => bench_command(rest),
        Some("soak") => soak_command(rest),
        Some("cache") => cache_command(rest),
        Some("info") => info_command(rest),
        Some("__first-launch") => first_launch(rest),
        // `jitbridge` alone, or with run's options only, runs.
        None => run_command(args),
        Some(first) if first.starts_with('-') => run_command(args),
        Some(other) => Err(Failure::Usage(
            format!("no command '{other}' (run, bench, soak, cache, info, help)"),
            &HELP,
        )),
    }
}

fn main() -> ExitCode {
    match text_args().and_then(|args| dispatch(&args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(Failure::Usage(message, c)) => {
            note!("jitbridge: {message}");
            note!("usage: {}", c.usage);
            note!("(`jitbridge help {}` for more)", c.name);
            ExitCode::from(2)
        }
        Err(Failure::Error(message)) => {
            note!("jitbridge: {message}");
            ExitCode::from(2)
        }
    }
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
