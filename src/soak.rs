//! `jitbridge soak`: a server's life in one process. A decode loop launches a warm kernel on its
//! own stream while embedding and rerank workers first-launch new kernels all along, two threads
//! share one stream, a batch worker allocates and frees arrays of varying sizes, and a forked
//! child compiles and exits midway. Every output is checked exactly; decode-step latency (alone
//! and with the others), device memory (reserved vs peak live) and RSS are measured.

mod decode;
mod workers;

use crate::bench::{Histogram, json_number, json_string};
pub use decode::DecodeMode;
use decode::{Decoded, Slow, Threshold};
use jitbridge::{
    Array, Counters, CustomKernel, DType, Device, KernelSpec, LaunchShape, Param, Stream, race,
    streams,
};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
pub use workers::Workers;

/// Kernels (hidden sizes x variants) each first-launch worker has: a server's are bounded,
/// and the cache keeps every module loaded, so an unbounded set would grow RSS by design.
const HIDDEN: [usize; 4] = [64, 128, 256, 512];
const VARIANTS: usize = 4;
/// Longest wait for the forked child before it is killed (it may be stuck on a lock).
const CHILD_DEADLINE: Duration = Duration::from_secs(30);
/// How often the controller samples memory and RSS.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);
/// Most arrays the batch worker keeps alive at once.
const BATCH_LIVE: usize = 8;

/// The targets, from the server-life issue.
pub const MAX_P99_RATIO: f64 = 1.1;
pub const MAX_RESERVED_RATIO: f64 = 1.25;
pub const MAX_RSS_GROWTH: f64 = 0.01;

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

/// Device memory and RSS at one moment, `at` seconds into the run.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub at: f64,
    pub live: u64,
    pub peak_live: u64,
    pub reserved: u64,
    pub rss: u64,
    /// Modules built or loaded from disk so far.
    pub modules: u64,
}

/// What a soak saw.
pub struct Report {
    pub seconds: f64,
    pub decode_mode: DecodeMode,
    /// The other workers that ran.
    pub workers: Workers,
    /// Whole decode steps in each phase.
    pub decode_alone: Latency,
    pub decode_together: Latency,
    /// Their parts: the launch call, and the wait for the output.
    pub alone_launch: Latency,
    pub alone_wait: Latency,
    pub together_launch: Latency,
    pub together_wait: Latency,
    /// What a slow step was (None when no step was measured alone before the others), and the
    /// slow steps in the second alone phase and with the others.
    pub threshold: Option<Threshold>,
    pub slow_alone: Slow,
    pub slow_together: Slow,
    /// Outputs checked, and how many of them were not exact.
    pub checked: u64,
    pub inexact: u64,
    /// Errors met (the first few kept as text).
    pub errors: u64,
    pub first_errors: Vec<String>,
    /// New kernels the first-launch workers launched.
    pub first_launches: u64,
    pub builds: u64,
    pub hits: u64,
    pub disk_hits: u64,
    /// Device memory the allocator took from and gave back to the driver over the run: each is a
    /// driver call that other threads' launches may wait on.
    pub driver_allocations: u64,
    pub driver_frees: u64,
    /// Samples after warm-up, in order.
    pub samples: Vec<Sample>,
    /// RSS floors of the third and last quarter of the samples with the others (the first half
    /// is the allocator's warm-up, see `run`), and RSS at the very end.
    pub rss_warm: u64,
    pub rss_late: u64,
    pub rss_end: u64,
    /// RSS one loaded module costs (measured before the run), and the modules loaded between
    /// the two RSS floors.
    pub module_rss: u64,
    pub modules_after_warm: u64,
    /// The forked child: "exact", or what went wrong.
    pub child: String,
    pub child_ok: bool,
}

/// Decode-step latencies (launch and wait) in one phase.
pub struct Latency {
    pub steps: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

impl Latency {
    fn of(histogram: &Histogram) -> Latency {
        Latency {
            steps: histogram.total(),
            p50_ns: histogram.quantile(0.5),
            p99_ns: histogram.quantile(0.99),
            max_ns: histogram.max,
        }
    }
}

impl Report {
    pub fn exact(&self) -> bool {
        self.inexact == 0 && self.errors == 0 && self.child_ok
    }
    pub fn p99_ratio(&self) -> f64 {
        self.decode_together.p99_ns as f64 / self.decode_alone.p99_ns.max(1) as f64
    }
    /// The most reserved / peak live seen after warm-up (None without a sample).
    pub fn reserved_ratio(&self) -> Option<f64> {
        self.samples
            .iter()
            .filter(|s| s.peak_live > 0)
            .map(|s| s.reserved as f64 / s.peak_live as f64)
            .max_by(f64::total_cmp)
    }
    /// RSS growth after warm-up: from the first floor to the last, as a fraction of the first.
    pub fn rss_growth(&self) -> f64 {
        self.rss_late.saturating_sub(self.rss_warm) as f64 / self.rss_warm.max(1) as f64
    }
    /// The same, less the modules loaded after warm-up at their measured price: what the
    /// target judges.
    pub fn rss_growth_net(&self) -> f64 {
        let modules = self.modules_after_warm * self.module_rss;
        self.rss_late.saturating_sub(self.rss_warm + modules) as f64 / self.rss_warm.max(1) as f64
    }
    /// Each target: name, measured text, target text, met (None: not measurable here).
    pub fn targets(&self) -> Vec<(&'static str, String, String, Option<bool>)> {
        let reserved = self.reserved_ratio();
        vec![
            (
                "every output exact",
                format!(
                    "{} checked, {} inexact, {} errors, child {}",
                    self.checked, self.inexact, self.errors, self.child
                ),
                "all exact, no error".into(),
                Some(self.exact()),
            ),
            (
                "decode p99 with others vs alone",
                format!(
                    "{:.2}x (workers {}, decode {})",
                    self.p99_ratio(),
                    self.workers.describe(),
                    self.decode_mode.name()
                ),
                format!("<= {MAX_P99_RATIO}x"),
                Some(self.p99_ratio() <= MAX_P99_RATIO),
            ),
            (
                "reserved vs peak live device bytes",
                reserved.map_or("no sample".into(), |r| format!("{r:.3}x")),
                format!("<= {MAX_RESERVED_RATIO}x"),
                reserved.map(|r| r <= MAX_RESERVED_RATIO),
            ),
            (
                "RSS growth after warm-up, less modules",
                format!(
                    "{:.3}% ({:.3}% less {} modules at {} KiB)",
                    self.rss_growth_net() * 100.0,
                    self.rss_growth() * 100.0,
                    self.modules_after_warm,
                    self.module_rss / 1024
                ),
                format!("< {}%", MAX_RSS_GROWTH * 100.0),
                Some(self.rss_growth_net() < MAX_RSS_GROWTH),
            ),
        ]
    }
}

/// Resident bytes of this process (/proc/self/statm, second field, in pages).
pub fn rss_bytes() -> u64 {
    unsafe extern "C" {
        fn sysconf(name: i32) -> i64;
    }
    const SC_PAGESIZE: i32 = 30; // Linux
    // SAFETY: sysconf reads a constant.
    let page = unsafe { sysconf(SC_PAGESIZE) }.max(1) as u64;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page)
}

/// glibc's heap now, for `JITBRIDGE_SOAK_MALLINFO=1` (tells an allocator high-water mark from a
/// leak): (bytes in use, bytes held by arenas and mmapped blocks).
pub fn heap_bytes() -> (u64, u64) {
    #[repr(C)]
    #[derive(Default)]
    struct Mallinfo2 {
        arena: usize,
        ordblks: usize,
        smblks: usize,
        hblks: usize,
        hblkhd: usize,
        usmblks: usize,
        fsmblks: usize,
        uordblks: usize,
        fordblks: usize,
        keepcost: usize,
    }
    unsafe extern "C" {
        fn mallinfo2() -> Mallinfo2;
    }
    // SAFETY: mallinfo2 (glibc >= 2.33) only reads the allocator's statistics.
    let m = unsafe { mallinfo2() };
    ((m.uordblks + m.hblkhd) as u64, (m.arena + m.hblkhd) as u64)
}

/// Device memory now, summed over devices (the soak uses one): (live, peak live, reserved).
fn device_memory() -> (u64, u64, u64) {
    let c = Counters::read();
    (c.mem_live_bytes, c.mem_peak_live_bytes, c.mem_reserved_bytes)
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

/// A small deterministic generator for sizes (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn exact_f32(got: &[f32], want: impl Fn(usize) -> f32) -> bool {
    got.iter().enumerate().all(|(i, &v)| v == want(i))
}

/// A first-launch worker's kernel for a hidden size and variant: a new module for each pair.
fn worker_kernel(
    name: &str,
    body: &str,
    hidden: usize,
    variant: usize,
) -> Result<CustomKernel, jitbridge::Error> {
    CustomKernel::new(&KernelSpec {
        name,
        inputs: &[("inp", DType::F32)],
        outputs: &[("out", DType::F32)],
        params: &[("HIDDEN", Param::Int(hidden as i64)), ("VARIANT", Param::Int(variant as i64))],
        body,
        ..Default::default()
    })
}

/// The embedding or rerank worker: launches its recent kernels on batches of varying sizes,
/// and first-launches a new kernel (next hidden size, next variant) every `every`, until its
/// HIDDEN x VARIANTS kernels are all built.
#[allow(clippy::too_many_arguments)]
fn first_launch_worker(
    device: Device,
    every: Duration,
    role: &'static str,
    body: &'static str,
    want: fn(f32, usize, usize) -> f32,
    seed: u64,
    stop: &AtomicBool,
    tally: &Tally,
) -> Result<(), jitbridge::Error> {
    let stream = streams::new_thread_local_generation_stream(device)?;
    let _guard = streams::install_thread_local_default_stream(&stream)?;
    let mut rng = Rng(seed);
    let mut kernels: Vec<(CustomKernel, usize, usize)> = Vec::new();
    let mut next = 0usize;
    let mut last_new: Option<Instant> = None;
    while !stop.load(Ordering::Acquire) {
        let more = next < HIDDEN.len() * VARIANTS;
        if more && last_new.is_none_or(|t| t.elapsed() >= every) {
            let hidden = HIDDEN[next % HIDDEN.len()];
            match worker_kernel(role, body, hidden, next) {
                Ok(kernel) => kernels.push((kernel, hidden, next)),
                Err(e) => tally.error(role, &e),
            }
            if kernels.len() > 4 {
                kernels.remove(0);
            }
            next += 1;
            last_new = Some(Instant::now());
            tally.first_launches.fetch_add(1, Ordering::Relaxed);
        }
        // The newest kernel's first launch, then the others' warm launches.
        for (kernel, hidden, variant) in kernels.iter().rev() {
            let batch = 1 + rng.below(16) as usize;
            let n = batch * hidden;
            let result = Array::arange(device, n, DType::F32).and_then(|inp| {
                let out = kernel.launch(&[&inp], &[&[batch, *hidden]], LaunchShape::Threads(n))?;
                out[0].to_vec::<f32>()
            });
            match result {
                Ok(v) => tally.check(exact_f32(&v, |i| want(i as f32, *hidden, *variant)), role),
                Err(e) => tally.error(role, &e),
            }
        }
    }
    Ok(())
}

const EMBED_BODY: &str = "const uint64_t i = thread_index(); \
    if (i < out_size) out[i] = inp[i] * 2.0f + (f32)(HIDDEN / 64) + (f32)(VARIANT % 7);";
fn embed_want(x: f32, hidden: usize, variant: usize) -> f32 {
    x * 2.0 + (hidden / 64) as f32 + (variant % 7) as f32
}
const RERANK_BODY: &str = "const uint64_t i = thread_index(); \
    if (i < out_size) out[i] = inp[i] * 0.5f - (f32)(VARIANT % 5) - (f32)(HIDDEN % 3);";
fn rerank_want(x: f32, hidden: usize, variant: usize) -> f32 {
    x * 0.5 - (variant % 5) as f32 - (hidden % 3) as f32
}

fn add_kernel() -> Result<CustomKernel, jitbridge::Error> {
    CustomKernel::new(&KernelSpec {
        name: "soak_add",
        inputs: &[("inp", DType::F32)],
        outputs: &[("out", DType::F32)],
        body: "const uint64_t i = thread_index(); if (i < out_size) out[i] = inp[i] + 1.0f;",
        ..Default::default()
    })
}

/// One of the two threads sharing `stream` (installed as each one's default): arrays from host
/// data of varying sizes, a warm kernel, every output read back.
fn shared_stream_worker(
    stream: &Stream,
    kernel: &CustomKernel,
    who: u64,
    stop: &AtomicBool,
    tally: &Tally,
) -> Result<(), jitbridge::Error> {
    let device = stream.device();
    let _guard = streams::install_thread_local_default_stream(stream)?;
    let mut rng = Rng(0x5eed ^ ((who + 1) * 0x9e37_79b9));
    let mut round = 0u64;
    while !stop.load(Ordering::Acquire) {
        let n = 256 * (1 + rng.below(32) as usize);
        let base = (who * 1000 + round % 1000) as f32;
        round += 1;
        let data = vec![base; n];
        let result = Array::from_slice(device, &data, &[n]).and_then(|inp| {
            let out = kernel.launch(&[&inp], &[&[n]], LaunchShape::Threads(n))?;
            // A new array while the launch may still run: the case where holds went wrong.
            let other = Array::from_slice(device, &data, &[n])?;
            let (a, b) = (out[0].to_vec::<f32>()?, other.to_vec::<f32>()?);
            Ok((a, b))
        });
        match result {
            Ok((a, b)) => {
                tally.check(a.iter().all(|&v| v == base + 1.0), "shared stream");
                tally.check(b.iter().all(|&v| v == base), "shared stream, new array");
            }
            Err(e) => tally.error("shared stream", &e),
        }
    }
    Ok(())
}

/// Array sizes of the batch worker, in KiB-sized units of 256 f32: from 1 KiB to 4 MiB, most
/// not powers of two, in a fixed cycle (so that the warm-up sees the cycle's largest live set).
const BATCH_SIZES: [usize; 16] =
    [1, 37, 5, 300, 12, 1024, 64, 3, 700, 150, 9, 512, 20, 80, 1000, 2];

/// Keeps the last BATCH_LIVE arrays of the cycle of sizes alive, freeing the oldest for each
/// new one: live device bytes rise and fall as a server's batches do.
fn batch_worker(device: Device, stop: &AtomicBool, tally: &Tally) -> Result<(), jitbridge::Error> {
    let stream = streams::new_thread_local_generation_stream(device)?;
    let _guard = streams::install_thread_local_default_stream(&stream)?;
    let kernel = add_kernel()?;
    let mut live: std::collections::VecDeque<(Array, usize)> = Default::default();
    let check = |array: Array, n: usize| match array.to_vec::<f32>() {
        Ok(v) => tally.check(v.len() == n && exact_f32(&v, |i| i as f32 + 1.0), "batches"),
        Err(e) => tally.error("batches", &e),
    };
    for &units in BATCH_SIZES.iter().cycle() {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let n = 256 * units;
        let result = Array::arange(device, n, DType::F32)
            .and_then(|inp| kernel.launch(&[&inp], &[&[n]], LaunchShape::Threads(n)));
        match result {
            Ok(mut out) => live.push_back((out.remove(0), n)),
            Err(e) => tally.error("batches", &e),
        }
        if live.len() > BATCH_LIVE {
            if let Some((array, n)) = live.pop_front() {
                check(array, n);
            }
        }
    }
    for (array, n) in live {
        check(array, n);
    }
    Ok(())
}

unsafe extern "C" {
    fn fork() -> i32;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn kill(pid: i32, signal: i32) -> i32;
}
const WNOHANG: i32 = 1;
const SIGKILL: i32 = 9;

/// In the forked child: compile and launch a new kernel on the cpu on a stream of its own, then
/// exit through `exit` (atexit handlers run, as in any child that returns). Never returns.
fn child_compiles_and_exits(salt: u64) -> ! {
    let run = || -> Result<bool, jitbridge::Error> {
        let cpu = Device::cpu()?;
        let stream = Stream::new(cpu)?;
        let _guard = streams::install_thread_local_default_stream(&stream)?;
        let kernel = worker_kernel("soak_child", EMBED_BODY, 64, salt as usize)?;
        let inp = Array::arange(cpu, 256, DType::F32)?;
        let out = kernel.launch(&[&inp], &[&[256]], LaunchShape::Threads(256))?;
        let v = out[0].to_vec::<f32>()?;
        Ok(exact_f32(&v, |i| embed_want(i as f32, 64, salt as usize)))
    };
    std::process::exit(match run() {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(_) => 2,
    })
}

/// Forks a child that compiles and exits; waits for it (killing it past CHILD_DEADLINE).
fn fork_child(salt: u64) -> Result<(), String> {
    // SAFETY: the child only runs the library and exits; it never returns here.
    let pid = unsafe { fork() };
    if pid < 0 {
        return Err(format!("fork failed: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        child_compiles_and_exits(salt);
    }
    let deadline = Instant::now() + CHILD_DEADLINE;
    let mut status = 0;
    loop {
        // SAFETY: our own child, a valid status pointer.
        let r = unsafe { waitpid(pid, &mut status, WNOHANG) };
        if r == pid {
            break;
        }
        if r < 0 {
            return Err(format!("waitpid: {}", std::io::Error::last_os_error()));
        }
        if Instant::now() > deadline {
            // SAFETY: our own child, not yet reaped.
            unsafe {
                kill(pid, SIGKILL);
                waitpid(pid, &mut status, 0);
            }
            return Err(format!(
                "the forked child did not finish in {} s (stuck on a lock taken before the fork?)",
                CHILD_DEADLINE.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (signal, code) = (status & 0x7f, (status >> 8) & 0xff);
    match (signal, code) {
        (0, 0) => Ok(()),
        (0, 1) => Err("the forked child's output was not exact".into()),
        (0, 2) => Err("the forked child's compile or launch failed".into()),
        (0, c) => Err(format!("the forked child exited with status {c}")),
        (s, _) => Err(format!("the forked child died of signal {s}")),
    }
}

/// Counts a worker out when dropped, however it ends.
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Keeps glibc's mmap threshold at its default: left dynamic, it rises to the largest block
/// freed (the read-back of a 4 MiB batch), after which such blocks come from per-thread heaps
/// whose high-water marks creep up for minutes and read as RSS growth that is no leak.
fn fixed_mmap_threshold() {
    unsafe extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    const M_MMAP_THRESHOLD: i32 = -3;
    // SAFETY: a plain setting of the C allocator; setting it turns its dynamic rise off.
    unsafe { mallopt(M_MMAP_THRESHOLD, 128 * 1024) };
}

/// Modules built and loaded before the run to measure what one costs in RSS.
const MODULE_PROBES: usize = 8;

/// RSS bytes one more loaded module costs: the cache keeps every module by design, so the RSS
/// target discounts the modules the workers load after warm-up at this price.
fn module_rss_cost(device: Device) -> Result<u64, jitbridge::Error> {
    let inp = Array::arange(device, 64, DType::F32)?;
    let one = |variant: usize| -> Result<(), jitbridge::Error> {
        let kernel = worker_kernel("soak_rss_probe", EMBED_BODY, 64, variant)?;
        let out = kernel.launch(&[&inp], &[&[64]], LaunchShape::Threads(64))?;
        let v = out[0].to_vec::<f32>()?;
        if !exact_f32(&v, |i| embed_want(i as f32, 64, variant)) {
            return Err(jitbridge::Error::new_other("a module probe's output is not exact"));
        }
        Ok(())
    };
    one(0)?; // the first build's one-time set-up is no module's cost
    let before = rss_bytes();
    for variant in 1..=MODULE_PROBES {
        one(variant)?;
    }
    Ok(rss_bytes().saturating_sub(before) / MODULE_PROBES as u64)
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
/// launches as `mode` says.
pub fn run(
    device: Device,
    seconds: f64,
    workers: Workers,
    mode: DecodeMode,
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
            decode::decode_loop(device, decode, mode, phase, decode_ready, tally).map(Some);
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
        let sleep_until = |t: Instant| {
            let now = Instant::now();
            if t > now {
                std::thread::sleep(t - now);
            }
        };
        sleep_until(at(WARM_END));
        set(Phase::Alone);
        sleep_until(at(ALONE_END));
        set(Phase::TogetherWarm);
        others_started.store(true, Ordering::Release);
        sleep_until(at(TOGETHER_WARM_END));
        set(Phase::Together);
        samples.push(sample(start));
        while Instant::now() < at(TOGETHER_END) {
            std::thread::sleep(SAMPLE_EVERY);
            samples.push(sample(start));
        }
        // Alone again once every other worker has finished its last step.
        set(Phase::TogetherWarm);
        stop_others.store(true, Ordering::Release);
        while others_running.load(Ordering::Acquire) > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        set(Phase::Alone);
        sleep_until(at(1.0));
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
        workers,
        decode_alone: Latency::of(&d.alone.total),
        decode_together: Latency::of(&d.together.total),
        alone_launch: Latency::of(&d.alone.launch),
        alone_wait: Latency::of(&d.alone.wait),
        together_launch: Latency::of(&d.together.launch),
        together_wait: Latency::of(&d.together.wait),
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

impl Report {
    /// What the exit status judges: exactness and the memory targets, not latency.
    pub fn passed(&self) -> bool {
        self.exact()
            && self.reserved_ratio().is_none_or(|r| r <= MAX_RESERVED_RATIO)
            && self.rss_growth_net() < MAX_RSS_GROWTH
    }
}

/// The workers that ran, and a note when not all did.
fn workers_line(w: Workers) -> String {
    match w {
        Workers::ALL => format!("all: {}", Workers::NAMES.join(", ")),
        Workers::NONE => "none (--workers none: decode alone throughout)".into(),
        _ => format!("{} only (--workers: not all ran)", w.names().join(", ")),
    }
}

/// Slow steps of a phase, and which part dominated them.
fn slow_line(s: &Slow) -> String {
    format!(
        " {} of {} steps ({:.2}%); launch dominated {}, wait dominated {}; mean launch {}, wait {}",
        s.over,
        s.steps,
        100.0 * s.over as f64 / s.steps.max(1) as f64,
        s.launch_dominated,
        s.wait_dominated,
        us(s.mean_launch_ns()),
        us(s.mean_wait_ns())
    )
}

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
}

fn us(ns: u64) -> String {
    format!("{:.1} us", ns as f64 / 1e3)
}

/// About ten samples spread over the run, the first and last included.
fn some_samples(samples: &[Sample]) -> Vec<Sample> {
    let step = samples.len().div_ceil(10).max(1);
    let mut picked: Vec<Sample> = samples.iter().step_by(step).copied().collect();
    if let Some(last) = samples.last() {
        if picked.last().is_none_or(|p| p.at != last.at) {
            picked.push(*last);
        }
    }
    picked
}

pub fn print_table(device: Device, r: &Report) {
    out!(
        "jitbridge soak: {} {} ({}), {} s, {} cores",
        device.backend(),
        device.name(),
        device.arch(),
        r.seconds,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    out!("decode mode  {} ({})", r.decode_mode.name(), r.decode_mode.parts());
    out!("workers      {}", workers_line(r.workers));
    for (part, label, l) in [
        ("decode step", "alone", &r.decode_alone),
        ("  launch", "alone", &r.alone_launch),
        ("  wait", "alone", &r.alone_wait),
        ("decode step", "with others", &r.decode_together),
        ("  launch", "with others", &r.together_launch),
        ("  wait", "with others", &r.together_wait),
    ] {
        out!(
            "{part:<12} {label:<12} p50 {:>10}  p99 {:>10}  max {:>10}  ({} steps)",
            us(l.p50_ns),
            us(l.p99_ns),
            us(l.max_ns),
            l.steps
        );
    }
    match &r.threshold {
        None => out!("slow steps   none measured (no decode step alone before the others)"),
        Some(t) => {
            out!(
                "slow steps   above the alone p99 of {} (alone p50: launch {}, wait {}):",
                us(t.total_p99_ns),
                us(t.launch_p50_ns),
                us(t.wait_p50_ns)
            );
            for (label, slow) in [("alone again", &r.slow_alone), ("with others", &r.slow_together)]
            {
                out!("  {label:<11}{}", slow_line(slow));
            }
        }
    }
    out!(
        "outputs      {} checked, {} inexact, {} errors; forked child: {}",
        r.checked,
        r.inexact,
        r.errors,
        r.child
    );
    out!(
        "kernels      {} first launches by the workers; builds {}, disk loads {}, hits {}",
        r.first_launches,
        r.builds,
        r.disk_hits,
        r.hits
    );
    out!(
        "driver       {} device allocations, {} frees over the run",
        r.driver_allocations,
        r.driver_frees
    );
    out!(
        "memory       {:>7}  {:>12} {:>12} {:>12} {:>12}",
        "at",
        "live",
        "peak live",
        "reserved",
        "RSS"
    );
    for s in some_samples(&r.samples) {
        out!(
            "             {:>6.1}s  {:>12} {:>12} {:>12} {:>12}",
            s.at,
            mib(s.live),
            mib(s.peak_live),
            mib(s.reserved),
            mib(s.rss)
        );
    }
    out!(
        "RSS floor    {} early after warm-up, {} late, {} at the end",
        mib(r.rss_warm),
        mib(r.rss_late),
        mib(r.rss_end)
    );
    for e in &r.first_errors {
        out!("error        {e}");
    }
    out!("{:<36} {:<52} {:<14} met", "target", "value", "target");
    for (name, value, target, met) in r.targets() {
        let met = match met {
            Some(true) => "met",
            Some(false) => "missed",
            None => "not measured",
        };
        out!("{name:<36} {value:<52} {target:<14} {met}");
    }
}

pub fn print_json(device: Device, r: &Report) {
    let latency = |l: &Latency| {
        format!(
            "{{\"steps\":{},\"p50_ns\":{},\"p99_ns\":{},\"max_ns\":{}}}",
            l.steps, l.p50_ns, l.p99_ns, l.max_ns
        )
    };
    let samples: Vec<String> = r
        .samples
        .iter()
        .map(|s| {
            format!(
                "{{\"at_s\":{},\"live\":{},\"peak_live\":{},\"reserved\":{},\"rss\":{},\"modules\":{}}}",
                s.at, s.live, s.peak_live, s.reserved, s.rss, s.modules
            )
        })
        .collect();
    let targets: Vec<String> = r
        .targets()
        .iter()
        .map(|(name, value, target, met)| {
            format!(
                "{{\"name\":{},\"value\":{},\"target\":{},\"met\":{}}}",
                json_string(name),
                json_string(value),
                json_string(target),
                met.map_or("null".into(), |m| m.to_string())
            )
        })
        .collect();
    let errors: Vec<String> = r.first_errors.iter().map(|e| json_string(e)).collect();
    let slow = |s: &Slow| {
        format!(
            "{{\"steps\":{},\"over\":{},\"launch_dominated\":{},\"wait_dominated\":{},\
             \"mean_launch_ns\":{},\"mean_wait_ns\":{}}}",
            s.steps,
            s.over,
            s.launch_dominated,
            s.wait_dominated,
            s.mean_launch_ns(),
            s.mean_wait_ns()
        )
    };
    let threshold = r.threshold.map_or("null".into(), |t| {
        format!(
            "{{\"total_p99_ns\":{},\"launch_p50_ns\":{},\"wait_p50_ns\":{}}}",
            t.total_p99_ns, t.launch_p50_ns, t.wait_p50_ns
        )
    });
    let names: Vec<String> = r.workers.names().iter().map(|n| json_string(n)).collect();
    let parts = format!(
        "\"decode_mode\":{},\"workers\":[{}],\"all_workers\":{},\"alone_launch\":{},\
         \"alone_wait\":{},\"together_launch\":{},\"together_wait\":{},\"slow_threshold\":{},\
         \"slow_alone\":{},\"slow_together\":{}",
        json_string(r.decode_mode.name()),
        names.join(","),
        r.workers == Workers::ALL,
        latency(&r.alone_launch),
        latency(&r.alone_wait),
        latency(&r.together_launch),
        latency(&r.together_wait),
        threshold,
        slow(&r.slow_alone),
        slow(&r.slow_together)
    );
    out!(
        "{{\"backend\":{},\"device\":{},\"seconds\":{},\"decode_alone\":{},\"decode_together\":{},\
         \"p99_ratio\":{},\"checked\":{},\"inexact\":{},\"errors\":{},\"first_errors\":[{}],\
         \"child\":{},\"child_ok\":{},\"exact\":{},\"first_launches\":{},\"builds\":{},\
         \"disk_hits\":{},\"hits\":{},\"driver_allocations\":{},\"driver_frees\":{},\
         \"reserved_ratio\":{},\"rss_warm\":{},\
         \"rss_late\":{},\"rss_end\":{},\"rss_growth\":{},\
         \"module_rss\":{},\"modules_after_warm\":{},\"rss_growth_net\":{},{},\"samples\":[{}],\
         \"targets\":[{}],\"passed\":{}}}",
        json_string(&device.backend()),
        json_string(&device.name()),
        r.seconds,
        latency(&r.decode_alone),
        latency(&r.decode_together),
        json_number(Some(r.p99_ratio())),
        r.checked,
        r.inexact,
        r.errors,
        errors.join(","),
        json_string(&r.child),
        r.child_ok,
        r.exact(),
        r.first_launches,
        r.builds,
        r.disk_hits,
        r.hits,
        r.driver_allocations,
        r.driver_frees,
        json_number(r.reserved_ratio()),
        r.rss_warm,
        r.rss_late,
        r.rss_end,
        json_number(Some(r.rss_growth())),
        r.module_rss,
        r.modules_after_warm,
        json_number(Some(r.rss_growth_net())),
        parts,
        samples.join(","),
        targets.join(","),
        r.passed()
    );
}
