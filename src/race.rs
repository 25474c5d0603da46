//! The race-probe harness: rounds of threads that each install their own stream, meet at a
//! barrier and first-launch probe kernels together. The tests and the `jitbridge` command both
//! run their scenarios through it; it is no part of the library's API.

use crate::array::{Array, DType};
use crate::device::Device;
use crate::error::Error;
use crate::ffi;
use crate::stream::streams;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

/// A probe entry point: [`crate::jit_race_probe_array`] or
/// [`crate::rocm_faults::jit_race_probe_array`].
pub type Probe = fn(&Array, i32) -> Result<Array, Error>;

/// One thread's outcome: `Ok(true)` when its output was exact.
pub type ThreadOutcome = Result<bool, Error>;

/// The warm hitter's outcome: launches made, or the first error or inexact output.
pub type HitterOutcome = Result<u64, Error>;

/// The locks a test-only build removed (bits: 1 jit cache, 2 event pool, 4 configure); 0 for
/// every normal build.
pub fn removed_locks() -> i32 {
    // SAFETY: no arguments.
    unsafe { ffi::jb_removed_locks() }
}

/// Elements in each probe input, as the mission's tests use.
pub const PROBE_ELEMENTS: i64 = 256;

/// True when `values` is exactly 2*i + 1 at every i.
pub fn probe_output_exact(values: &[f32]) -> bool {
    values.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32 + 1.0)
}

/// Launches the probe on `input` on the thread's default stream and checks the output.
fn probe_once(probe: Probe, variant: i32, input: &Array) -> Result<bool, Error> {
    let out = probe(input, variant)?;
    out.eval()?;
    Ok(probe_output_exact(&out.to_vec::<f32>()?))
}

/// One round: a thread per entry of `variants`, each with its own installed stream, released
/// together by a barrier to launch its variant. Returns each thread's outcome: `Ok(true)` when
/// its output was exact.
pub fn first_launch_round(device: Device, probe: Probe, variants: &[i32]) -> Vec<ThreadOutcome> {
    round_with_hitter(device, probe, variants, None).0
}

/// Like [`first_launch_round`], while one more thread keeps launching `warm_variant` (already
/// built) until the first-launchers are done. The second value is the hitter's outcome:
/// launches made, or the first error or inexact output.
pub fn round_with_hitter(
    device: Device,
    probe: Probe,
    variants: &[i32],
    warm_variant: Option<i32>,
) -> (Vec<ThreadOutcome>, Option<HitterOutcome>) {
    let barrier = Arc::new(Barrier::new(variants.len() + usize::from(warm_variant.is_some())));
    let done = Arc::new(AtomicBool::new(false));
    std::thread::scope(|scope| {
        let hitter = warm_variant.map(|warm| {
            let (barrier, done) = (barrier.clone(), done.clone());
            scope.spawn(move || -> Result<u64, Error> {
                let input = Array::arange(device, PROBE_ELEMENTS, DType::F32)?;
                barrier.wait();
                let mut launches = 0;
                // At least one launch, then as many as fit while the others build.
                while launches == 0 || !done.load(Ordering::Acquire) {
                    if !probe_once(probe, warm, &input)? {
                        return Err(Error::new(
                            crate::ErrorCode::Other(-1),
                            format!("warm variant {warm}: output not exact"),
                        ));
                    }
                    launches += 1;
                }
                Ok(launches)
            })
        });
        let workers: Vec<_> = variants
            .iter()
            .map(|&variant| {
                let barrier = barrier.clone();
                scope.spawn(move || -> Result<bool, Error> {
                    let mut waited = false;
                    let mut launch = || -> Result<bool, Error> {
                        let stream = streams::new_thread_local_generation_stream(device)?;
                        let _default = streams::install_thread_local_default_stream(&stream)?;
                        let input = Array::arange(device, PROBE_ELEMENTS, DType::F32)?;
                        barrier.wait();
                        waited = true;
                        probe_once(probe, variant, &input)
                    };
                    let outcome = launch();
                    // A thread that failed before the barrier still meets it, or the rest hang.
                    if !waited {
                        barrier.wait();
                    }
                    outcome
                })
            })
            .collect();
        let outcomes: Vec<_> =
            workers.into_iter().map(|w| w.join().unwrap_or_else(|_| Err(panicked()))).collect();
        done.store(true, Ordering::Release);
        let hitter = hitter.map(|h| h.join().unwrap_or_else(|_| Err(panicked())));
        (outcomes, hitter)
    })
}

fn panicked() -> Error {
    Error::new(crate::ErrorCode::Other(-1), "a probe thread panicked")
}
