//! The measures of sections 1 and 2 of the bench: hit lookups, and latencies of hits and of new
//! threads' first launches while other threads build.

use super::fresh_variant;
use crate::histogram::Histogram;
use jitbridge::{
    Array, CustomKernel, DType, Device, KernelSpec, LaunchShape, jit_race_probe_array, race,
};
use race::Body;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Keys the lookup benchmark cycles through.
pub const WARM_KEYS: usize = 16;

pub fn warm_kernels(device: Device, salt: &str) -> Result<Vec<CustomKernel>, jitbridge::Error> {
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
pub fn all_ok<T>(results: Vec<Result<T, jitbridge::Error>>) -> Result<Vec<T>, jitbridge::Error> {
    results.into_iter().collect()
}

/// Lowers a counter when dropped, however the thread holding it ends: the others stop
/// waiting on it.
pub struct CountDown<'a>(&'a AtomicUsize);

impl Drop for CountDown<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Nanoseconds per hit lookup, seen by each of `threads` threads hitting at once.
pub fn lookup_ns(
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
pub enum HitLoop {
    /// A warm hit: `prepare` of a built kernel.
    Hit,
    /// The control: the same loop and clock reads, touching no jitbridge code, so its tail is
    /// the host's (scheduler, interrupts, page-table work of the builders).
    NoCall,
}

/// Latencies (ns) of warm hits from `hitters` threads while `builders` threads build
/// `builds_each` new probe variants each.
pub fn hit_latency_under_builds(
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
pub fn new_thread_first_launch(
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
