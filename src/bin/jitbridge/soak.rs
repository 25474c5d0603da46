//! `jitbridge soak`: a server's life in one process. A decode loop launches a warm kernel on its
//! own stream while embedding and rerank workers first-launch new kernels all along, two threads
//! share one stream, a batch worker allocates and frees arrays of varying sizes, and a forked
//! child compiles and exits midway. Every output is checked exactly; decode-step latency (alone
//! and with the others), device memory (reserved vs peak live) and RSS are measured.

mod decode;
mod fork_child;
mod memory;
mod print;
mod report;
mod worker_loops;
mod workers;

use crate::args::{
    Command, DEVICE_OPT, Opt, device_or_default, no_positional, parse_args, parse_count, print_help,
};
use crate::json::{Object, json_list, json_string};
use crate::progress::Progress;
use crate::rows::Results;
use crate::{Failure, Outcome};
pub use decode::DecodeMode;
use decode::Decoded;
use fork_child::fork_child;
use jitbridge::{Counters, Device, Stream, race};
use memory::{device_memory, fixed_mmap_threshold, heap_bytes, module_rss_cost, rss_bytes};
pub use report::{Latency, Report, Sample};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use worker_loops::{
    EMBED_BODY, HIDDEN, RERANK_BODY, VARIANTS, add_kernel, batch_worker, embed_want,
    first_launch_worker, rerank_want, shared_stream_worker,
};
pub use workers::Workers;

pub const SOAK: Command = Command {
    name: "soak",
    usage:
        "jitbridge soak [--seconds N] [--json] [--check] [--device cpu|gpu|cuda|rocm[:N]]
                      [--workers LIST] [--decode library|raw|graph] [--decode-priority high|normal]",
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
met: every output exact; the decode p99's rise with the others (with / alone) at most 1.05x the
raw control's rise in the same run (each step of the library or graph mode is followed by one
step of the raw control, timed apart; no such target with --decode raw); reserved at most 1.25x
peak live; RSS growth after warm-up at most 1%. RSS growth is judged on runs of at least 60 s
only: a shorter run prints it and says it is too short to judge.

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

It takes --seconds and a few seconds more (set-up, and the forked child's wait); progress goes
to stderr, one updating line on a terminal, a line per phase otherwise.

options:
  --seconds N   how long, 1 to 86400 (default 30; RSS growth is judged from 60)
  --json        one JSON object on stdout instead of the table: the schema shared with
                `jitbridge bench --json`, described in docs/JSON.md
  --check       exit with status 1 when a judged target is missed (for CI)
  --device D    cpu, gpu, cuda or rocm, with an optional :N (default: as for run)
  --workers L   the other workers that run beside decode: a comma list of embed (first-launch
                worker), rerank (another), shared (two threads sharing one stream), batch
                (arrays of varying sizes), fork (a child that compiles and exits); or all (the
                default) or none (decode alone throughout). The report names those that ran;
                the targets are judged all the same
  --decode M    library (the default): each step is launch_with_scalars, then eval;
                raw: the control alone, each step only the backend's launch + event record, then
                the event's wait, of a launch the library staged once into one fixed output (no
                lookup, array, hold or allocation); every output is still checked exactly;
                graph: each step sets the scalar of a graph of the step's launch captured once
                and replays it, then eval
  --decode-priority P  high (the default): the decode stream has the device's most urgent
                stream priority, above the other workers' streams;
                normal: the priority every other stream has

exit status: 0 when every output was exact (with --check: and every judged target was met),
1 when not, 2 on an error. The latency target was set for the H200 host: on a loaded host it
is missed without a fault of the library, so judge it with --check on the host it is for",
};

/// Most seconds `soak --seconds` takes: a day.
const MAX_SOAK_SECONDS: u64 = 86_400;

const OPTIONS: [Opt; 7] = [
    Opt { flag: "--seconds", value: Some("how long to run, 1 to 86400 seconds") },
    Opt { flag: "--json", value: None },
    Opt { flag: "--check", value: None },
    DEVICE_OPT,
    Opt {
        flag: "--workers",
        value: Some("a comma list of embed, rerank, shared, batch, fork; or all, or none"),
    },
    Opt { flag: "--decode", value: Some("library, raw or graph") },
    Opt { flag: "--decode-priority", value: Some("high or normal") },
];

pub fn soak_command(args: &[String]) -> Outcome {
    let Some(args) = parse_args(&SOAK, args, &OPTIONS)? else {
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
        Some(text) => Workers::parse(text).map_err(usage)?,
        None => Workers::ALL,
    };
    let mode = match args.get("--decode") {
        Some(text) => DecodeMode::parse(text).map_err(usage)?,
        None => DecodeMode::Library,
    };
    let device = device_or_default(args.get("--device"))?;
    let priority = match args.get("--decode-priority") {
        None | Some("high") => device.max_stream_priority(),
        Some("normal") => 0,
        Some(other) => {
            return Err(usage(format!(
                "--decode-priority takes 'high' or 'normal', not '{other}'"
            )));
        }
    };
    let date = crate::host::now_utc();
    let start = Instant::now();
    let report = run(device, seconds as f64, workers, mode, priority, true)?;
    let options = Object::new()
        .count("seconds", seconds as u64)
        .raw("workers", json_list(workers.names().iter().map(|n| json_string(n))))
        .flag("all_workers", workers == Workers::ALL)
        .text("decode", mode.name())
        .count("decode_priority", report.decode_priority.max(0) as u64)
        .build();
    let results = Results {
        command: "soak",
        device,
        options,
        date,
        seconds: start.elapsed().as_secs_f64(),
        rows: report.rows(),
        details: print::details_json(&report),
    };
    if args.has("--json") {
        results.print_json();
    } else {
        print::print_details(device, &report);
        results.print_table();
    }
    // A wrong output fails the run on its own; a missed target only under --check.
    Ok(report.exact() && (!args.has("--check") || results.missed() == 0))
}

/// How often the controller samples memory and RSS.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// Which part of the run the decode loop is in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Phase {
    /// Decode alone, not measured.
    Warm = 0,
    /// Decode alone, measured (before and after the others).
    Alone = 1,
    /// The others started, not measured yet (their first kernels, threads, arenas).
    TogetherWarm = 2,
    /// Decode with the others, measured.
    Together = 3,
    Stop = 4,
}

impl Phase {
    fn load(value: u8) -> Phase {
        match value {
            0 => Phase::Warm,
            1 => Phase::Alone,
            2 => Phase::TogetherWarm,
            3 => Phase::Together,
            _ => Phase::Stop,
        }
    }
}

/// Errors and inexact outputs, from every worker.
struct Tally {
    checked: AtomicU64,
    inexact: AtomicU64,
    errors: AtomicU64,
    first_errors: Mutex<Vec<String>>,
    first_launches: AtomicU64,
}

impl Tally {
    fn check(&self, exact: bool, what: &str) {
        self.checked.fetch_add(1, Ordering::Relaxed);
        if !exact {
            self.inexact.fetch_add(1, Ordering::Relaxed);
            self.note(format!("{what}: output not exact"));
        }
    }
    fn error(&self, what: &str, e: &jitbridge::Error) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.note(format!("{what}: {e}"));
    }
    fn note(&self, text: String) {
        let mut first = self.first_errors.lock().unwrap_or_else(|p| p.into_inner());
        if first.len() < 5 {
            first.push(text);
        }
    }
}

/// Counts a worker out when dropped, however it ends.
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The soak's phases on stderr, each with the seconds gone; nothing when not shown.
struct PhaseProgress {
    shown: Option<Progress>,
    start: Instant,
    seconds: f64,
}

impl PhaseProgress {
    fn terminal(&self) -> bool {
        self.shown.as_ref().is_some_and(Progress::terminal)
    }
    fn tell(&mut self, what: &str) {
        let gone = self.start.elapsed().as_secs_f64();
        if let Some(shown) = &mut self.shown {
            shown.show(&format!("soak: {gone:.0} of {} s, {what}", self.seconds));
        }
    }
    /// Waits until `t`; on a terminal the line counts the seconds meanwhile.
    fn wait_until(&mut self, t: Instant, what: &str) {
        self.tell(what);
        while let Some(left) = t.checked_duration_since(Instant::now()) {
            let terminal = self.terminal();
            std::thread::sleep(if terminal { left.min(Duration::from_secs(1)) } else { left });
            if terminal {
                self.tell(what);
            }
        }
    }
    fn finish(&mut self) {
        if let Some(shown) = &mut self.shown {
            shown.finish();
        }
    }
}

/// Where each phase ends, as fractions of the run.
const WARM_END: f64 = 0.05;
const ALONE_END: f64 = 0.20;
const TOGETHER_WARM_END: f64 = 0.45;
const TOGETHER_END: f64 = 0.85;
/// In the first half of the measured phase with the others: a fork raises the parent's RSS once
/// (about 1-2% here, seen without a fork as flat), a step the RSS floors must not straddle.
const FORK_AT: f64 = TOGETHER_WARM_END + (TOGETHER_END - TOGETHER_WARM_END) / 4.0;

/// Runs the soak on `device` for `seconds`, with the other `workers` beside a decode loop that
/// launches as `mode` says on a stream of `decode_priority` (clamped to what the device offers);
/// with `show_progress`, the phases on stderr.
pub fn run(
    device: Device,
    seconds: f64,
    workers: Workers,
    mode: DecodeMode,
    decode_priority: i32,
    show_progress: bool,
) -> Result<Report, jitbridge::Error> {
    let fork = workers.fork;
    let phase = &AtomicU8::new(Phase::Warm as u8);
    let stop_others = &AtomicBool::new(false);
    let tally = &Tally {
        checked: AtomicU64::new(0),
        inexact: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        first_errors: Mutex::new(Vec::new()),
        first_launches: AtomicU64::new(0),
    };
    fixed_mmap_threshold();
    let module_rss = module_rss_cost(device)?;
    let before = Counters::read();
    let shared = &Stream::new(device)?;
    let add = &add_kernel()?;
    add.prepare(device)?;
    let decode = &decode::decode_kernel()?;
    decode.prepare(device)?;
    let decode_ready = &AtomicBool::new(false);
    // The child's kernel is new in each run, so that it compiles; the workers' kernels are the
    // same in every run, so that runs do not fill the disk cache.
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let seed = 0x50a6_u64;

    type Outcome = Result<Option<Decoded>, jitbridge::Error>;
    type Controller = (Vec<Sample>, u64);
    let controller_result: &Mutex<Option<Controller>> = &Mutex::new(None);
    let child_result = &Mutex::new(if fork { Err("not forked".into()) } else { Ok(()) });
    let mut bodies: Vec<race::Body<'_, Option<Decoded>>> = Vec::new();
    bodies.push(Box::new(move |pass: race::Pass<'_>| -> Outcome {
        if !pass.wait() {
            return Err(race::cancelled());
        }
        let decoded =
            decode::decode_loop(device, decode, mode, decode_priority, phase, decode_ready, tally)
                .map(Some);
        // A decode loop that failed to start must not keep the controller waiting.
        decode_ready.store(true, Ordering::Release);
        decoded
    }));
    let others_started = &AtomicBool::new(false);
    let others_running = &AtomicUsize::new(workers.threads());
    // Every other worker waits for the together phase.
    let wait_turn = move || {
        while !others_started.load(Ordering::Acquire) && !stop_others.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    // New kernels spread over the time with the others (warm-up and measured).
    let every = Duration::from_secs_f64(
        seconds * (TOGETHER_END - ALONE_END) / (HIDDEN.len() as f64 * VARIANTS as f64),
    );
    for (on, role, body, want, s) in [
        (workers.embed, "soak_embed", EMBED_BODY, embed_want as fn(f32, usize, usize) -> f32, seed),
        (
            workers.rerank,
            "soak_rerank",
            RERANK_BODY,
            rerank_want as fn(f32, usize, usize) -> f32,
            seed.rotate_left(17),
        ),
    ] {
        if !on {
            continue;
        }
        bodies.push(Box::new(move |pass: race::Pass<'_>| -> Outcome {
            let _done = Done(others_running);
            if !pass.wait() {
                return Err(race::cancelled());
            }
            wait_turn();
            first_launch_worker(device, every, role, body, want, s, stop_others, tally)
                .map(|()| None)
        }));
    }
    for who in (0..2).filter(|_| workers.shared) {
        bodies.push(Box::new(move |pass: race::Pass<'_>| -> Outcome {
            let _done = Done(others_running);
            if !pass.wait() {
                return Err(race::cancelled());
            }
            wait_turn();
            shared_stream_worker(shared, add, who, stop_others, tally).map(|()| None)
        }));
    }
    if workers.batch {
        bodies.push(Box::new(move |pass: race::Pass<'_>| -> Outcome {
            let _done = Done(others_running);
            if !pass.wait() {
                return Err(race::cancelled());
            }
            wait_turn();
            batch_worker(device, stop_others, tally).map(|()| None)
        }));
    }
    if fork {
        bodies.push(Box::new(move |pass: race::Pass<'_>| -> Outcome {
            let _done = Done(others_running);
            if !pass.wait() {
                return Err(race::cancelled());
            }
            let fork_at = Instant::now() + Duration::from_secs_f64(seconds * FORK_AT);
            while Instant::now() < fork_at && !stop_others.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(5));
            }
            if !stop_others.load(Ordering::Acquire) {
                *child_result.lock().unwrap_or_else(|p| p.into_inner()) = fork_child(salt);
            }
            Ok(None)
        }));
    }
    // The controller: phases and samples.
    bodies.push(Box::new(move |pass: race::Pass<'_>| -> Outcome {
        if !pass.wait() {
            return Err(race::cancelled());
        }
        // The timeline starts with the first decode step.
        while !decode_ready.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let start = Instant::now();
        let at = |fraction: f64| start + Duration::from_secs_f64(seconds * fraction);
        let mut samples = Vec::new();
        let sample = |start: Instant| {
            let (live, peak_live, reserved) = device_memory();
            let c = Counters::read();
            if std::env::var_os("JITBRIDGE_SOAK_MALLINFO").is_some() {
                let (used, held) = heap_bytes();
                let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
                let kib = |key: &str| {
                    status.lines().find_map(|l| l.strip_prefix(key)).map_or("?", str::trim)
                };
                eprintln!(
                    "mallinfo {:.2}s rss {} heap in use {} held {} anon {} file {}",
                    start.elapsed().as_secs_f64(),
                    rss_bytes(),
                    used,
                    held,
                    kib("RssAnon:"),
                    kib("RssFile:")
                );
            }
            Sample {
                at: start.elapsed().as_secs_f64(),
                live,
                peak_live,
                reserved,
                rss: rss_bytes(),
                modules: c.builds + c.disk_hits,
            }
        };
        let set = |p: Phase| phase.store(p as u8, Ordering::Release);
        let mut progress =
            PhaseProgress { shown: show_progress.then(Progress::new), start, seconds };
        progress.wait_until(at(WARM_END), "decode alone, warming up");
        set(Phase::Alone);
        progress.wait_until(at(ALONE_END), "decode alone");
        set(Phase::TogetherWarm);
        others_started.store(true, Ordering::Release);
        progress.wait_until(at(TOGETHER_WARM_END), "with the others, warming up");
        set(Phase::Together);
        progress.tell("with the others");
        samples.push(sample(start));
        let mut told = Instant::now();
        while Instant::now() < at(TOGETHER_END) {
            std::thread::sleep(SAMPLE_EVERY);
            samples.push(sample(start));
            if told.elapsed() >= Duration::from_secs(1) && progress.terminal() {
                progress.tell("with the others");
                told = Instant::now();
            }
        }
        // Alone again once every other worker has finished its last step.
        set(Phase::TogetherWarm);
        progress.tell("stopping the others");
        stop_others.store(true, Ordering::Release);
        while others_running.load(Ordering::Acquire) > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        set(Phase::Alone);
        progress.wait_until(at(1.0), "decode alone again");
        progress.finish();
        let end = sample(start);
        set(Phase::Stop);
        *controller_result.lock().unwrap_or_else(|p| p.into_inner()) = Some((samples, end.rss));
        Ok(None)
    }));
    let results = race::together(bodies);
    // However the run ended, no thread is left waiting.
    stop_others.store(true, Ordering::Release);
    let results = results?;
    let mut decoded = None;
    for result in results {
        match result {
            Ok(Some(d)) => decoded = Some(d),
            Ok(None) => {}
            Err(e) => tally.error("worker", &e),
        }
    }
    let d = decoded.unwrap_or_else(Decoded::empty);
    let (samples, rss_end) = controller_result
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .unwrap_or_else(|| (Vec::new(), 0));
    // RSS floors (the least RSS) of the third and the last quarter of the samples: a leak
    // raises the floor; a large buffer read back at the moment of a sample does not. The first
    // half is the allocator's warm-up: glibc's per-thread arenas and first-touched code pages
    // reach their high-water mark there (heap bytes in use stay flat, JITBRIDGE_SOAK_MALLINFO).
    let quarter = samples.len().div_ceil(4);
    let floor = |window: &[Sample]| window.iter().min_by_key(|s| s.rss).copied();
    let half = samples.len() / 2;
    let first = floor(&samples[half..(half + quarter).min(samples.len())]);
    let last = floor(&samples[samples.len().saturating_sub(quarter)..]);
    let (rss_warm, rss_late, modules_after_warm) = match (first, last) {
        (Some(a), Some(b)) => (a.rss, b.rss, b.modules.saturating_sub(a.modules)),
        _ => (0, 0, 0),
    };
    let child = std::mem::replace(
        &mut *child_result.lock().unwrap_or_else(|p| p.into_inner()),
        Err("taken".into()),
    );
    let delta = Counters::read().since(&before);
    let first_errors = tally.first_errors.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Ok(Report {
        seconds,
        decode_mode: mode,
        decode_priority: d.priority,
        workers,
        decode_alone: Latency::of(&d.alone.total),
        decode_together: Latency::of(&d.together.total),
        alone_launch: Latency::of(&d.alone.launch),
        alone_wait: Latency::of(&d.alone.wait),
        together_launch: Latency::of(&d.together.launch),
        together_wait: Latency::of(&d.together.wait),
        control: d.control.as_ref().map(|(a, t)| (Latency::of(a), Latency::of(t))),
        threshold: d.threshold,
        slow_alone: d.slow_alone,
        slow_together: d.slow_together,
        checked: tally.checked.load(Ordering::Relaxed),
        inexact: tally.inexact.load(Ordering::Relaxed),
        errors: tally.errors.load(Ordering::Relaxed),
        first_errors,
        first_launches: tally.first_launches.load(Ordering::Relaxed),
        builds: delta.builds,
        hits: delta.hits,
        disk_hits: delta.disk_hits,
        driver_allocations: delta.mem_allocations,
        driver_frees: delta.mem_frees,
        samples,
        rss_warm,
        rss_late,
        rss_end,
        module_rss,
        modules_after_warm,
        child_ok: child.is_ok(),
        child: match child {
            Ok(()) if !fork => "none (not asked for)".into(),
            Ok(()) => "exact".into(),
            Err(e) => e,
        },
    })
}
