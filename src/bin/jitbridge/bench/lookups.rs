//! Sections 1 to 3 of the bench: hit lookups (the lookaside against the plain read-lock
//! protocol), and the latencies of hits and of new threads' first launches while other threads
//! build.

use super::{Context, fresh_variant, median};
use crate::histogram::Histogram;
use crate::rows::{H200, Row, Target, Unit, counted, pretty_ns};
use jitbridge::{
    Array, CustomKernel, DType, Device, KernelSpec, LaunchShape, jit_race_probe_array, race,
    set_lookaside_enabled,
};
use race::Body;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Section 1: nanoseconds per hit lookup at 1 to 16 threads (and the host's core count), with
/// the lookaside against the plain protocol.
pub fn hit_lookups(context: &mut Context<'_>, rows: &mut Vec<Row>) -> Result<(), jitbridge::Error> {
    let (device, lookups) = (context.device, context.scale.lookups_per_thread);
    let kernels = context.warm_kernels()?;
    let cores = crate::host::cores();
    let mut thread_counts = vec![1, 2, 4, 8, 16];
    if !thread_counts.contains(&cores) {
        thread_counts.push(cores);
        thread_counts.sort_unstable();
    }
    for threads in thread_counts {
        set_lookaside_enabled(false);
        let plain = lookup_ns(device, kernels, threads, lookups);
        set_lookaside_enabled(true);
        let lookaside = lookup_ns(device, kernels, threads, lookups)?;
        let row = Row::new("hit lookup", counted(threads as u64, "thread"), lookaside, Unit::Ns)
            .against(plain?);
        rows.push(if threads == 16 {
            row.target(Target {
                max_value: Some(30.0),
                max_ratio: Some(1.0 / 20.0),
                text: "<= 30 ns, >= 20x faster",
                set_for: H200,
            })
        } else {
            row
        });
    }
    // The same hits with an event callback installed, one thread per core (16 at most): memory
    // hits are never events, so the hit path must not change. Alternated with runs without, so
    // that drift falls on both alike; more threads than cores would measure the scheduler.
    let threads = cores.clamp(1, 16);
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        without.push(lookup_ns(device, kernels, threads, lookups)?);
        jitbridge::set_event_callback(|_| {})?;
        let measured = lookup_ns(device, kernels, threads, lookups);
        jitbridge::clear_event_callback()?;
        with.push(measured?);
    }
    let measure = format!("{threads} threads, event callback installed");
    let row = Row::new("hit lookup", measure, median(with), Unit::Ns).against(median(without));
    rows.push(row.target(Target {
        max_value: None,
        max_ratio: Some(1.05),
        text: "within 1.05x of no callback",
        set_for: H200,
    }));
    Ok(())
}

/// Section 2: warm hits from two threads while two others build new keys; the lookaside, the
/// plain protocol, and a control loop that calls no jitbridge code (the host's own tail).
pub fn hits_during_builds(
    context: &mut Context<'_>,
    rows: &mut Vec<Row>,
) -> Result<(), jitbridge::Error> {
    let (device, builds_each) = (context.device, context.scale.builds_each);
    let kernels = context.warm_kernels()?;
    let mut histograms = Vec::new();
    for (enabled, what) in [(false, HitLoop::Hit), (true, HitLoop::Hit), (true, HitLoop::NoCall)] {
        set_lookaside_enabled(enabled);
        let histogram = hit_latency_under_builds(device, kernels, what, 2, 2, builds_each);
        set_lookaside_enabled(true);
        let histogram = histogram?;
        let (max, p99, samples) = (histogram.max, histogram.quantile(0.99), histogram.total());
        let mode = match (enabled, what) {
            (_, HitLoop::NoCall) => "control, no jitbridge call",
            (true, _) => "lookaside",
            (false, _) => "plain protocol",
        };
        let row = Row::new(
            "hit during builds",
            format!("max, {mode} ({samples} hits)"),
            max as f64,
            Unit::Ns,
        );
        rows.push(if enabled && what == HitLoop::Hit {
            row.target(Target {
                max_value: Some(50_000.0),
                max_ratio: None,
                text: "max <= 50 us",
                set_for: H200,
            })
        } else {
            row
        });
        rows.push(Row::new("hit during builds", format!("p99, {mode}"), p99 as f64, Unit::Ns));
        if enabled {
            histograms.push((mode, histogram));
        }
    }
    for (mode, histogram) in &histograms {
        for (lower, count) in histogram.log2_buckets() {
            let upper = if lower == 0 { 1 } else { lower * 2 };
            let bucket =
                format!("{mode}: [{}, {})", pretty_ns(lower as f64), pretty_ns(upper as f64));
            rows.push(Row::new("hit histogram", bucket, count as f64, Unit::Samples));
        }
    }
    Ok(())
}

/// Section 3: a new thread's first launch of a warm kernel while two threads build, with the
/// published index and with the plain protocol.
pub fn new_thread_launches(
    context: &mut Context<'_>,
    rows: &mut Vec<Row>,
) -> Result<(), jitbridge::Error> {
    let (device, new_threads) = (context.device, context.scale.new_threads);
    let kernels = context.warm_kernels()?;
    for enabled in [false, true] {
        set_lookaside_enabled(enabled);
        let histogram = new_thread_first_launch(device, &kernels[0], new_threads, 2);
        set_lookaside_enabled(true);
        let histogram = histogram?;
        let mode = if enabled { "published index" } else { "plain protocol" };
        let max = Row::new(
            "new thread launch",
            format!("max, {mode} ({} threads)", histogram.total()),
            histogram.max as f64,
            Unit::Ns,
        );
        rows.push(if enabled {
            max.target(Target {
                max_value: Some(1_000_000.0),
                max_ratio: None,
                text: "max <= 1 ms",
                set_for: H200,
            })
        } else {
            max
        });
        let p99 = histogram.quantile(0.99) as f64;
        rows.push(Row::new("new thread launch", format!("p99, {mode}"), p99, Unit::Ns));
    }
    Ok(())
}

/// Keys the lookup sections cycle through.
const WARM_KEYS: usize = 16;

pub fn warm_kernels(device: Device, salt: &str) -> Result<Vec<CustomKernel>, jitbridge::Error> {
    (0..WARM_KEYS)
        .map(|k| {
            let salt = super::salt_comment(salt)?;
            let body = format!("out[thread_index()] = inp[thread_index()] + {k}.0f; {salt}");
            // SAFETY: the body adds to one element and subscripts its arrays; the salt is a
            // comment (checked).
            let kernel = unsafe {
                CustomKernel::new(&KernelSpec {
                    name: "bench_lookup",
                    inputs: &[("inp", DType::F32)],
                    outputs: &[("out", DType::F32)],
                    body: &body,
                    ..Default::default()
                })?
            };
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
                    // SAFETY: the body reads and writes element thread_index() of 64, 64 threads.
                    let out = unsafe {
                        kernel.launch_unchecked(&[input], &[&[64]], LaunchShape::Threads(64))?
                    };
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
