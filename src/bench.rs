//! `jitbridge bench`: the launch path's costs, each against its baseline, measured in one run.

use jitbridge::{
    Array, CustomKernel, DType, Device, KernelSpec, LaunchShape, Stream, bench_support,
    jit_race_probe_array, race, set_lookaside_enabled, streams,
};
use race::Body;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Keys the lookup benchmark cycles through.
const WARM_KEYS: usize = 16;
/// Section 3's raw and full loops alternate in this many blocks each.
const PROBE_BLOCKS: i32 = 10;
/// Probe variants the bench builds come from here up, clear of the run scenario's.
static NEXT_VARIANT: AtomicI32 = AtomicI32::new(900_000_000);

/// How much work each measure does.
pub struct Scale {
    lookups_per_thread: usize,
    probe_launches: i32,
    cold_samples: usize,
    builds_each: usize,
    new_process_rounds: usize,
    new_threads: usize,
    soak_seconds: f64,
    pub quick: bool,
}

impl Scale {
    /// The full run, whose numbers the targets are about.
    pub const FULL: Scale = Scale {
        lookups_per_thread: 200_000,
        probe_launches: 20_000,
        cold_samples: 5,
        builds_each: 4,
        new_process_rounds: 3,
        new_threads: 200,
        soak_seconds: 20.0,
        quick: false,
    };
    /// Every measure once and small (seconds): checks the bench works, its numbers are noise.
    pub const QUICK: Scale = Scale {
        lookups_per_thread: 2_000,
        probe_launches: 100,
        cold_samples: 1,
        builds_each: 1,
        new_process_rounds: 1,
        new_threads: 4,
        soak_seconds: 2.0,
        quick: true,
    };
}

/// The targets were set for, and measured on, the lent H200 host.
const H200: &str = "H200 host, 16 cores";
const H200_CUDA: &str = "H200 host, cuda backend";

/// What a row should reach, and on which hardware that was asked for.
#[derive(Clone, Copy)]
struct Target {
    /// Ceiling of the value, in the row's unit.
    max_value: Option<f64>,
    /// Ceiling of value / baseline.
    max_ratio: Option<f64>,
    text: &'static str,
    hardware: &'static str,
}

impl Target {
    fn met(&self, value: f64, ratio: Option<f64>) -> bool {
        let value_ok = self.max_value.is_none_or(|max| value <= max);
        let ratio_ok = match self.max_ratio {
            None => true,
            Some(max) => ratio.is_some_and(|r| r <= max),
        };
        value_ok && ratio_ok
    }
}

pub struct Row {
    section: &'static str,
    name: String,
    value: f64,
    unit: &'static str,
    baseline: Option<f64>,
    target: Option<Target>,
}

impl Row {
    fn ratio(&self) -> Option<f64> {
        self.baseline.filter(|b| *b > 0.0).map(|b| self.value / b).filter(|r| r.is_finite())
    }
    fn met(&self) -> Option<bool> {
        self.target.map(|t| t.met(self.value, self.ratio()))
    }
}

/// Starts the bench's variants at a place no earlier run on this host used, so no source the
/// bench compiles is in NVRTC's compute cache (a rerun would otherwise compile from it).
fn seed_variants() {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mixed =
        (nanos ^ u64::from(std::process::id()).rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // Up to 1.9e9, leaving 2.4e8 variants before i32::MAX.
    NEXT_VARIANT.store(900_000_000 + (mixed >> 34) as i32 % 1_000_000_000, Ordering::Relaxed);
}

fn fresh_variant() -> i32 {
    NEXT_VARIANT.fetch_add(1, Ordering::Relaxed)
}

fn warm_kernels(device: Device, salt: &str) -> Result<Vec<CustomKernel>, jitbridge::Error> {
    (0..WARM_KEYS)
        .map(|k| {
            let body = format!("out[thread_index()] = inp[thread_index()] + {k}.0f; /* {salt} */");
            let kernel = CustomKernel::new(&KernelSpec {
                name: "bench_lookup",
                inputs: &[("inp", DType::F32)],
                outputs: &[("out", DType::F32)],
                body: &body,
                ..Default::default()
            })?;
            kernel.prepare(device)?;
            Ok(kernel)
        })
        .collect()
}

/// Every thread's result, or the first error (a thread that could not start, or failed).
fn all_ok<T>(results: Vec<Result<T, jitbridge::Error>>) -> Result<Vec<T>, jitbridge::Error> {
    results.into_iter().collect()
}

/// Lowers a counter when dropped, however the thread holding it ends: the others stop
/// waiting on it.
struct CountDown<'a>(&'a AtomicUsize);

impl Drop for CountDown<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Nanoseconds per hit lookup, seen by each of `threads` threads hitting at once.
fn lookup_ns(
    device: Device,
    kernels: &[CustomKernel],
    threads: usize,
    lookups: usize,
) -> Result<f64, jitbridge::Error> {
    let bodies: Vec<Body<'_, Duration>> = (0..threads)
        .map(|_| -> Body<'_, Duration> {
            Box::new(move |pass: race::Pass<'_>| {
                for k in kernels {
                    k.prepare(device)?; // this thread's first lookups
                }
                if !pass.wait() {
                    return Err(race::cancelled());
                }
                let start = Instant::now();
                for i in 0..lookups {
                    kernels[i % kernels.len()].prepare(device)?;
                }
                Ok(start.elapsed())
            })
        })
        .collect();
    let per_thread = all_ok(race::together(bodies)?)?;
    let mean = per_thread.iter().map(Duration::as_secs_f64).sum::<f64>() / threads as f64;
    Ok(mean * 1e9 / lookups as f64)
}

/// Latencies in nanoseconds: exact below 4096 ns, then 16 buckets per power of two.
pub(crate) struct Histogram {
    counts: Vec<u64>,
    pub(crate) max: u64,
}

impl Histogram {
    pub(crate) fn new() -> Self {
        let mut counts = vec![0; 4096 + 64 * 16];
        // Touch every page now, not on the first record (a page fault would be measured).
        for page in counts.chunks_mut(512) {
            page[0] = 1;
            page[0] = std::hint::black_box(page[0]) - 1;
        }
        Histogram { counts, max: 0 }
    }
    fn bucket(ns: u64) -> usize {
        if ns < 4096 {
            return ns as usize;
        }
        let power = 63 - ns.leading_zeros() as usize; // >= 12
        let sub = ((ns >> (power - 4)) & 15) as usize;
        (4096 + (power - 12) * 16 + sub).min(4096 + 64 * 16 - 1)
    }
    fn lower_bound(bucket: usize) -> u64 {
        if bucket < 4096 {
            return bucket as u64;
        }
        let power = (bucket - 4096) / 16 + 12;
        let sub = ((bucket - 4096) % 16) as u64;
        (1u64 << power) + (sub << (power - 4))
    }
    pub(crate) fn record(&mut self, ns: u64) {
        self.counts[Self::bucket(ns)] += 1;
        self.max = self.max.max(ns);
    }
    fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.max = self.max.max(other.max);
    }
    /// (lower bound, count) per power of two: [0, 1), [1, 2), [2, 4), ...; empty ones left out.
    fn log2_buckets(&self) -> Vec<(u64, u64)> {
        let mut powers = [0u64; 65];
        for (bucket, &count) in self.counts.iter().enumerate().filter(|(_, c)| **c > 0) {
            powers[(64 - Self::lower_bound(bucket).leading_zeros()) as usize] += count;
        }
        powers
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(p, c)| (if p == 0 { 0 } else { 1u64 << (p - 1) }, *c))
            .collect()
    }
    pub(crate) fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
    pub(crate) fn quantile(&self, q: f64) -> u64 {
        let total: u64 = self.counts.iter().sum();
        let wanted = (total as f64 * q).ceil() as u64;
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= wanted && count > 0 {
                return Self::lower_bound(bucket);
            }
        }
        self.max
    }
}

/// What each timed step of the section 2 loop does.
#[derive(Clone, Copy, PartialEq)]
enum HitLoop {
    /// A warm hit: `prepare` of a built kernel.
    Hit,
    /// The control: the same loop and clock reads, touching no jitbridge code, so its tail is
    /// the host's (scheduler, interrupts, page-table work of the builders).
    NoCall,
}

/// Latencies (ns) of warm hits from `hitters` threads while `builders` threads build
/// `builds_each` new probe variants each.
fn hit_latency_under_builds(
    device: Device,
    kernels: &[CustomKernel],
    what: HitLoop,
    hitters: usize,
    builders: usize,
    builds_each: usize,
) -> Result<Histogram, jitbridge::Error> {
    let builders_left = &AtomicUsize::new(builders);
    let mut bodies: Vec<Body<'_, Option<Histogram>>> = Vec::new();
    for _ in 0..hitters {
        bodies.push(Box::new(move |pass: race::Pass<'_>| {
            let mut histogram = Histogram::new();
            for k in kernels {
                k.prepare(device)?;
            }
            if !pass.wait() {
                return Err(race::cancelled());
            }
            let mut i = 0;
            while builders_left.load(Ordering::Acquire) > 0 {
                let start = Instant::now();
                match what {
                    HitLoop::Hit => kernels[i % kernels.len()].prepare(device)?,
                    HitLoop::NoCall => {
                        std::hint::black_box(&kernels[i % kernels.len()]);
                    }
                }
                histogram.record(start.elapsed().as_nanos() as u64);
                i += 1;
            }
            Ok(Some(histogram))
        }));
    }
    for _ in 0..builders {
        bodies.push(Box::new(move |pass: race::Pass<'_>| {
            let _done = CountDown(builders_left);
            let input = Array::arange(device, race::PROBE_ELEMENTS, DType::F32)?;
            if !pass.wait() {
                return Err(race::cancelled());
            }
            for _ in 0..builds_each {
                jit_race_probe_array(&input, fresh_variant())?.eval()?;
            }
            Ok(None)
        }));
    }
    let mut merged = Histogram::new();
    for histogram in all_ok(race::together(bodies)?)?.iter().flatten() {
        merged.merge(histogram);
    }
    Ok(merged)
}

/// Latencies (ns) of first launches of a warm kernel, each on a new thread, while `builders`
/// threads keep building new probe variants. New threads start one after another, for at most
/// about 20 s.
fn new_thread_first_launch(
    device: Device,
    kernel: &CustomKernel,
    new_threads: usize,
    builders: usize,
) -> Result<Histogram, jitbridge::Error> {
    let input = &Array::arange(device, 64, DType::F32)?;
    let timing = &AtomicUsize::new(1);
    let mut bodies: Vec<Body<'_, Option<Histogram>>> = Vec::new();
    for _ in 0..builders {
        bodies.push(Box::new(move |pass: race::Pass<'_>| {
            let input = Array::arange(device, race::PROBE_ELEMENTS, DType::F32)?;
            if !pass.wait() {
                return Err(race::cancelled());
            }
            while timing.load(Ordering::Acquire) > 0 {
                jit_race_probe_array(&input, fresh_variant())?.eval()?;
            }
            Ok(None)
        }));
    }
    bodies.push(Box::new(move |pass: race::Pass<'_>| {
        let _done = CountDown(timing);
        if !pass.wait() {
            return Err(race::cancelled());
        }
        let mut histogram = Histogram::new();
        // The plain protocol can keep a reader waiting for seconds: the run stays bounded.
        let deadline = Instant::now() + Duration::from_secs(20);
        for _ in 0..new_threads {
            if Instant::now() > deadline {
                break;
            }
            let ns = std::thread::scope(|t| {
                let first = std::thread::Builder::new().spawn_scoped(t, || {
                    let start = Instant::now();
                    let out = kernel.launch(&[input], &[&[64]], LaunchShape::Threads(64))?;
                    let ns = start.elapsed().as_nanos() as u64;
                    out[0].eval()?;
                    Ok::<u64, jitbridge::Error>(ns)
                });
                let first = first.map_err(|e| {
                    jitbridge::Error::new_other(format!("cannot start a new thread: {e}"))
                })?;
                first.join().unwrap_or_else(|_| {
                    Err(jitbridge::Error::new_other("a first-launch thread panicked"))
                })
            })?;
            histogram.record(ns);
            // Spread the new threads over several builds.
            std::thread::sleep(Duration::from_micros(500));
        }
        Ok(Some(histogram))
    }));
    let mut results = all_ok(race::together(bodies)?)?;
    Ok(results.pop().flatten().unwrap_or_else(Histogram::new))
}

/// One row per power-of-two latency bucket of `histogram`.
fn histogram_rows(rows: &mut Vec<Row>, section: &'static str, label: &str, histogram: &Histogram) {
    for (lower, count) in histogram.log2_buckets() {
        let upper = if lower == 0 { 1 } else { lower * 2 };
        rows.push(Row {
            section,
            name: format!("{label}: [{}, {})", pretty(lower as f64), pretty(upper as f64)),
            value: count as f64,
            unit: "samples",
            baseline: None,
            target: None,
        });
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

pub fn run(device: Device, scale: &Scale) -> Result<Vec<Row>, jitbridge::Error> {
    seed_variants();
    let mut rows = Vec::new();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut thread_counts = vec![1, 2, 4, 8, 16];
    if !thread_counts.contains(&cores) {
        thread_counts.push(cores);
        thread_counts.sort_unstable();
    }

    // 1. Hit lookups: lookaside against the plain read-lock protocol.
    note!("bench: hit lookups");
    let kernels = warm_kernels(device, "lookup")?;
    for &threads in &thread_counts {
        set_lookaside_enabled(false);
        let plain = lookup_ns(device, &kernels, threads, scale.lookups_per_thread)?;
        set_lookaside_enabled(true);
        let lookaside = lookup_ns(device, &kernels, threads, scale.lookups_per_thread)?;
        rows.push(Row {
            section: "1 hit lookup",
            name: format!("{threads} threads"),
            value: lookaside,
            unit: "ns",
            baseline: Some(plain),
            target: (threads == 16).then_some(Target {
                max_value: Some(30.0),
                max_ratio: Some(1.0 / 20.0),
                text: "<= 30 ns, >= 20x faster",
                hardware: H200,
            }),
        });
    }

    // 2. Warm hits while other threads build new keys.
    note!("bench: hit latency during builds");
    let mut histograms = Vec::new();
    for (enabled, what) in [(false, HitLoop::Hit), (true, HitLoop::Hit), (true, HitLoop::NoCall)] {
        set_lookaside_enabled(enabled);
        let histogram = hit_latency_under_builds(device, &kernels, what, 2, 2, scale.builds_each)?;
        let (max, p99, samples) = (histogram.max, histogram.quantile(0.99), histogram.total());
        let mode = match (enabled, what) {
            (_, HitLoop::NoCall) => "control, no jitbridge call",
            (true, _) => "lookaside",
            (false, _) => "plain protocol",
        };
        if enabled {
            histograms.push((mode, histogram));
        }
        rows.push(Row {
            section: "2 hit during builds",
            name: format!("max, {mode} ({samples} hits)"),
            value: max as f64,
            unit: "ns",
            baseline: None,
            target: (enabled && what == HitLoop::Hit).then_some(Target {
                max_value: Some(50_000.0),
                max_ratio: None,
                text: "max <= 50 us",
                hardware: H200,
            }),
        });
        rows.push(Row {
            section: "2 hit during builds",
            name: format!("p99, {mode}"),
            value: p99 as f64,
            unit: "ns",
            baseline: None,
            target: None,
        });
    }
    for (mode, histogram) in &histograms {
        histogram_rows(&mut rows, "2 hit histogram", mode, histogram);
    }
    set_lookaside_enabled(true);

    // 2b. A new thread's first launch of a warm kernel while other threads build.
    note!("bench: new threads' first launches during builds");
    for enabled in [false, true] {
        set_lookaside_enabled(enabled);
        let histogram = new_thread_first_launch(device, &kernels[0], scale.new_threads, 2)?;
        let mode = if enabled { "published index" } else { "plain protocol" };
        rows.push(Row {
            section: "2b new thread launch",
            name: format!("max, {mode} ({} threads)", histogram.total()),
            value: histogram.max as f64,
            unit: "ns",
            baseline: None,
            target: enabled.then_some(Target {
                max_value: Some(1_000_000.0),
                max_ratio: None,
                text: "max <= 1 ms",
                hardware: H200,
            }),
        });
        rows.push(Row {
            section: "2b new thread launch",
            name: format!("p99, {mode}"),
            value: histogram.quantile(0.99) as f64,
            unit: "ns",
            baseline: None,
            target: None,
        });
    }
    set_lookaside_enabled(true);

    // 3. The probe launch path against a bare backend launch plus event record.
    note!("bench: probe launch path");
    // A stream of the section's own: what earlier sections did on the thread's default stream
    // (an older array read behind newer work makes a stream record every event for a while)
    // does not carry over.
    let probe_stream = Stream::new(device)?;
    let probe_installed = streams::install_thread_local_default_stream(&probe_stream)?;
    let input = Array::arange(device, race::PROBE_ELEMENTS, DType::F32)?;
    let variant = fresh_variant();
    let full_launches = |launches: i32| -> Result<f64, jitbridge::Error> {
        let start = Instant::now();
        let mut last = None;
        for _ in 0..launches {
            last = Some(jit_race_probe_array(&input, variant)?);
        }
        if let Some(last) = last {
            last.eval()?;
        }
        Ok(start.elapsed().as_nanos() as f64 / f64::from(launches))
    };
    // Warm: the buffer cache and event pool first fill up to the depth the loop keeps in
    // flight (a driver allocation each), as the raw path's one output is allocated untimed.
    let cold_pools_ns = full_launches(scale.probe_launches)?;
    // The two alternate in blocks, so that drift of the host (the raw loop alone moves by 8%
    // between runs a second apart on the H200 host) falls on both alike.
    let (mut raw_sum, mut full_sum) = (0.0, 0.0);
    let block = (scale.probe_launches / PROBE_BLOCKS).max(1);
    for _ in 0..PROBE_BLOCKS {
        raw_sum += bench_support::raw_probe_launches(&input, variant, block)?;
        full_sum += full_launches(block)?;
    }
    let (raw_ns, full_ns) = (raw_sum / f64::from(PROBE_BLOCKS), full_sum / f64::from(PROBE_BLOCKS));
    rows.push(Row {
        section: "3 probe launch",
        name: "per call, full path vs raw launch + event".into(),
        value: full_ns,
        unit: "ns",
        baseline: Some(raw_ns),
        target: Some(Target {
            max_value: None,
            max_ratio: Some(1.05),
            text: "<= 1.05x raw",
            hardware: H200,
        }),
    });
    rows.push(Row {
        section: "3 probe launch",
        name: "per call, the first loop (pools filling up)".into(),
        value: cold_pools_ns,
        unit: "ns",
        baseline: Some(raw_ns),
        target: None,
    });
    drop(probe_installed);

    // 4. Cold first launch against the bare compiler on a source of the same shape. NVRTC
    // keeps what it compiled in the driver's compute cache (~/.nv/ComputeCache), keyed by source
    // and program name: a source compiled before, by this process or an earlier one, compiles in
    // about a third of the time. So the baseline compiles another never-built variant (never the
    // first launch's own source), the variants are new to this host (seed_variants), and which of
    // the two runs first alternates, so neither side gets the warmer compiler.
    note!("bench: cold first launch");
    let mut first = Vec::new();
    let mut build = Vec::new();
    let mut compile = Vec::new();
    for sample in 0..scale.cold_samples {
        let (variant, other) = (fresh_variant(), fresh_variant());
        let name = format!("mlxcel_jit_race_probe_v{other}");
        let fresh_source = CustomKernel::new(&KernelSpec {
            name: &name,
            inputs: &[("inp", DType::F32)],
            outputs: &[("out", DType::F32)],
            body: race::probe_body(),
            ..Default::default()
        })?;
        if sample % 2 == 1 {
            compile.push(bench_support::compile_only(&fresh_source, device)?);
        }
        let before = jitbridge::Counters::read();
        let start = Instant::now();
        jit_race_probe_array(&input, variant)?.eval()?;
        first.push(start.elapsed().as_nanos() as f64);
        build.push(jitbridge::Counters::read().since(&before).build_ns as f64);
        if sample % 2 == 0 {
            compile.push(bench_support::compile_only(&fresh_source, device)?);
        }
    }
    let compile = median(compile);
    rows.push(Row {
        section: "4 cold first launch",
        name: format!("median of {}, first launch vs compiler alone", scale.cold_samples),
        value: median(first),
        unit: "ns",
        baseline: Some(compile),
        target: Some(Target {
            max_value: None,
            max_ratio: Some(1.05),
            text: "<= 1.05x",
            hardware: H200,
        }),
    });
    rows.push(Row {
        section: "4 cold first launch",
        name: "of which the build (compile + module load)".into(),
        value: median(build),
        unit: "ns",
        baseline: Some(compile),
        target: None,
    });
    // The same first launch, timed step by step inside the library.
    let steps: Vec<bench_support::ColdSteps> = (0..scale.cold_samples)
        .map(|_| bench_support::cold_probe_steps(&input, fresh_variant()))
        .collect::<Result<_, _>>()?;
    let step = |f: fn(&bench_support::ColdSteps) -> f64| median(steps.iter().map(f).collect());
    type Step = fn(&bench_support::ColdSteps) -> f64;
    let step_rows: [(&str, Step); 11] = [
        ("step: first launch as a whole", |s| s.total_ns),
        ("step: staging (lookup, build, outputs)", |s| s.stage_ns),
        ("step: compile", |s| s.compile_ns),
        ("step: module load", |s| s.load_ns),
        ("step: get function", |s| s.get_function_ns),
        ("step: configure", |s| s.configure_ns),
        ("step: disk-cache store (probes skip it)", |s| s.disk_store_ns),
        ("step: first launch call", |s| s.launch_ns),
        ("step: holds (the event is recorded lazily)", |s| s.record_ns),
        ("step: wait for the kernel", |s| s.sync_ns),
        ("same source compiled again (NVRTC: a cache hit)", |s| s.compile_again_ns),
    ];
    for (name, f) in step_rows {
        rows.push(Row {
            section: "4 cold first launch",
            name: name.into(),
            value: step(f),
            unit: "ns",
            baseline: Some(compile),
            target: None,
        });
    }

    // 5. First launch in a new process: compiled (empty disk cache) against loaded from disk.
    note!("bench: first launch in a new process");
    let (cold, warm) = first_launch_in_new_processes(device, scale.new_process_rounds)?;
    rows.push(Row {
        section: "5 new process",
        name: "first launch, entry on disk vs no entry".into(),
        value: warm,
        unit: "ns",
        baseline: Some(cold),
        target: Some(Target {
            max_value: Some(300_000.0),
            max_ratio: None,
            text: "warm <= 0.3 ms",
            hardware: H200_CUDA,
        }),
    });

    // 6. The soak's decode step alone and while other workers first-launch new kernels.
    note!("bench: decode steps during first launches (a short soak)");
    let others = crate::soak::Workers { fork: false, ..crate::soak::Workers::ALL };
    let soak =
        crate::soak::run(device, scale.soak_seconds, others, crate::soak::DecodeMode::Library)?;
    if !soak.exact() {
        let first = soak.first_errors.first().cloned().unwrap_or_default();
        return Err(jitbridge::Error::new_other(format!(
            "the soak's outputs were not exact: {first}"
        )));
    }
    if soak.decode_alone.steps == 0 || soak.decode_together.steps == 0 {
        return Err(jitbridge::Error::new_other("the soak measured no decode step in a phase"));
    }
    for (name, alone, together) in [
        (
            "decode step p50, with first launches vs alone",
            soak.decode_alone.p50_ns,
            soak.decode_together.p50_ns,
        ),
        (
            "decode step p99, with first launches vs alone",
            soak.decode_alone.p99_ns,
            soak.decode_together.p99_ns,
        ),
    ] {
        let p99 = name.contains("p99");
        rows.push(Row {
            section: "6 decode under load",
            name: format!("{name} ({} s soak)", scale.soak_seconds),
            value: together as f64,
            unit: "ns",
            baseline: Some(alone as f64),
            target: p99.then_some(Target {
                max_value: None,
                max_ratio: Some(crate::soak::MAX_P99_RATIO),
                text: "<= 1.1x",
                hardware: H200,
            }),
        });
    }
    Ok(rows)
}

/// Runs `jitbridge __first-launch` twice on one fresh cache folder: the first compiles and
/// stores, the second loads. Returns (cold, warm) nanoseconds, each the median of `rounds`.
fn first_launch_in_new_processes(
    device: Device,
    rounds: usize,
) -> Result<(f64, f64), jitbridge::Error> {
    let failed = |what: String| jitbridge::Error::new_other(what);
    let exe = std::env::current_exe().map_err(|e| failed(e.to_string()))?;
    let device_arg = device.spec();
    let once = |dir: &std::path::Path, salt: &str| -> Result<(f64, u64), jitbridge::Error> {
        let out = std::process::Command::new(&exe)
            .args(["__first-launch", &device_arg, salt])
            .env("JITBRIDGE_CACHE_DIR", dir)
            .env_remove("JITBRIDGE_DISK_CACHE")
            .output()
            .map_err(|e| failed(e.to_string()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let field = |name: &str| {
            text.split_whitespace().find_map(|kv| kv.strip_prefix(name)?.parse::<f64>().ok())
        };
        match (out.status.success(), field("first_launch_ns="), field("disk_hits=")) {
            (true, Some(ns), Some(hits)) => Ok((ns, hits as u64)),
            _ => Err(failed(format!("first-launch child failed: {text}"))),
        }
    };
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let dir = std::env::temp_dir().join(format!("jb-bench-{}-{round}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // Each round's source is new to the host: the cold child compiles it from nothing.
        let salt = format!("salt {}", fresh_variant());
        let (ns, hits) = once(&dir, &salt)?;
        assert_eq!(hits, 0, "a fresh folder held an entry");
        cold.push(ns);
        let (ns, hits) = once(&dir, &salt)?;
        if hits != 1 {
            return Err(failed("the second process did not load from disk".into()));
        }
        warm.push(ns);
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok((median(cold), median(warm)))
}

fn pretty(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} us", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

pub fn print_table(device: Device, scale: &Scale, rows: &[Row]) {
    out!(
        "jitbridge bench: {} {} ({}), {} cores{}",
        device.backend(),
        device.name(),
        device.arch(),
        cores(),
        if scale.quick {
            ", --quick: every measure small, the numbers are not comparable"
        } else {
            ""
        }
    );
    out!(
        "{:<20} {:<48} {:>11} {:>11} {:>9}  {:<6}  target (set for)",
        "section",
        "measure",
        "value",
        "baseline",
        "ratio",
        "met"
    );
    for row in rows {
        let value = if row.unit == "ns" {
            pretty(row.value)
        } else {
            format!("{} {}", row.value, row.unit)
        };
        let baseline = row.baseline.map(pretty).unwrap_or_default();
        let ratio = row.ratio().map(|r| format!("{r:.2}x")).unwrap_or_default();
        let (met, target) = match (row.met(), row.target) {
            (Some(met), Some(t)) => {
                (if met { "met" } else { "missed" }, format!("{} ({})", t.text, t.hardware))
            }
            _ => ("", String::new()),
        };
        out!(
            "{:<20} {:<48} {:>11} {:>11} {:>9}  {:<6}  {}",
            row.section,
            row.name,
            value,
            baseline,
            ratio,
            met,
            target
        );
    }
    out!("ratio = value / baseline; for lookups the baseline is the plain read-lock protocol");
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub(crate) fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number, or null for none (JSON has no NaN or infinity).
pub(crate) fn json_number(value: Option<f64>) -> String {
    match value {
        Some(v) if v.is_finite() => format!("{v}"),
        _ => "null".into(),
    }
}

fn json_target(target: Option<Target>) -> String {
    match target {
        None => "null".into(),
        Some(t) => format!(
            "{{\"text\":{},\"max_value\":{},\"max_ratio\":{},\"hardware\":{}}}",
            json_string(t.text),
            json_number(t.max_value),
            json_number(t.max_ratio),
            json_string(t.hardware)
        ),
    }
}

pub fn print_json(device: Device, scale: &Scale, rows: &[Row]) {
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{{\"section\":{},\"measure\":{},\"value\":{},\"unit\":{},\"baseline\":{},\"ratio\":{},\"target\":{},\"met\":{}}}",
                json_string(r.section),
                json_string(&r.name),
                json_number(Some(r.value)),
                json_string(r.unit),
                json_number(r.baseline),
                json_number(r.ratio()),
                json_target(r.target),
                r.met().map_or("null".to_string(), |m| m.to_string())
            )
        })
        .collect();
    out!(
        "{{\"backend\":{},\"device\":{},\"arch\":{},\"cores\":{},\"quick\":{},\"rows\":[{}]}}",
        json_string(&device.backend()),
        json_string(&device.name()),
        json_string(&device.arch()),
        cores(),
        scale.quick,
        items.join(",")
    );
}
