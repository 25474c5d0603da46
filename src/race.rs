//! The race-probe harness: rounds of threads that each install their own stream, meet at a
//! barrier and first-launch probe kernels together. The tests and the `jitbridge` command both
//! run their scenarios through it; it is no part of the library's API.
//!
//! A round never hangs: a thread that fails before the barrier still counts as arrived, and a
//! thread that cannot be started opens the barrier for the others and fails the round.

use crate::array::Array;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, ErrorCode};
use crate::stream::streams;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

/// A probe entry point: [`crate::jit_race_probe_array`] or
/// [`crate::rocm_faults::jit_race_probe_array`].
pub type Probe = fn(&Array, i32) -> Result<Array, Error>;

/// One thread's outcome: `Ok(true)` when its output was exact.
pub type ThreadOutcome = Result<bool, Error>;

/// The warm hitter's outcome: launches made, or the first error or inexact output.
pub type HitterOutcome = Result<u64, Error>;

/// Elements in each probe input, as the mission's tests use.
pub const PROBE_ELEMENTS: usize = 256;

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

/// A one-shot barrier that can be cancelled: `std::sync::Barrier` waits forever for a thread
/// that was never started.
pub struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

struct GateState {
    arrived: usize,
    expected: usize,
    open: bool,
    cancelled: bool,
}

impl Gate {
    /// A gate that opens once `expected` threads arrived.
    pub fn new(expected: usize) -> Self {
        let state = GateState { arrived: 0, expected, open: expected == 0, cancelled: false };
        Gate { state: Mutex::new(state), changed: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        // The state is a few counters, consistent at every unlock: a panic elsewhere leaves it usable.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A pass for one thread: `wait` with it, or drop it (on an early failure) to arrive
    /// without waiting.
    pub fn pass(&self) -> Pass<'_> {
        Pass { gate: self, used: false }
    }

    fn arrive(&self) -> MutexGuard<'_, GateState> {
        let mut state = self.lock();
        state.arrived += 1;
        if state.arrived >= state.expected && !state.open {
            state.open = true;
            self.changed.notify_all();
        }
        state
    }

    /// Opens the gate for everyone waiting, as failed: some thread will never arrive.
    pub fn cancel(&self) {
        let mut state = self.lock();
        if !state.open {
            state.cancelled = true;
            self.changed.notify_all();
        }
    }
}

/// One thread's place at a [`Gate`]: dropped unused, it counts as arrived.
pub struct Pass<'g> {
    gate: &'g Gate,
    used: bool,
}

impl Pass<'_> {
    /// Waits until every thread arrived (true) or the round was cancelled (false).
    pub fn wait(mut self) -> bool {
        self.used = true;
        let mut state = self.gate.arrive();
        while !state.open && !state.cancelled {
            state = self.gate.changed.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        state.open
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        // A thread that failed (or panicked) before the barrier still counts, or the rest hang.
        if !self.used {
            drop(self.gate.arrive());
        }
    }
}

/// A thread's work for [`together`]: given its pass to the shared gate.
pub type Body<'env, T> = Box<dyn FnOnce(Pass<'_>) -> Result<T, Error> + Send + 'env>;

/// Runs each body on a thread of its own, all sharing one [`Gate`] (each body gets its
/// [`Pass`]), and returns their results in order. Err when a thread could not be started: the
/// started ones were released (their `wait` returned false) and joined, never left hanging.
pub fn together<T: Send>(bodies: Vec<Body<'_, T>>) -> Result<Vec<Result<T, Error>>, Error> {
    let total = bodies.len();
    let gate = &Gate::new(total);
    std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(total);
        for (index, body) in bodies.into_iter().enumerate() {
            let spawned = std::thread::Builder::new()
                .name(format!("jb-together-{index}"))
                .spawn_scoped(scope, move || body(gate.pass()));
            match spawned {
                Ok(handle) => handles.push(handle),
                Err(e) => {
                    gate.cancel();
                    return Err(not_started(index, total, e));
                }
            }
        }
        Ok(handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(panicked()))).collect())
    })
}

fn not_started(index: usize, total: usize, e: std::io::Error) -> Error {
    Error::new(
        ErrorCode::System,
        format!(
            "cannot start thread {} of {total}: {e} (lower the thread count, or raise the limit \
             on threads: ulimit -u, ulimit -v)",
            index + 1
        ),
    )
}

/// What a thread released by a cancelled [`Gate`] returns.
pub fn cancelled() -> Error {
    Error::new(ErrorCode::Other(-1), "round cancelled: another probe thread could not be started")
}

fn panicked() -> Error {
    Error::new(ErrorCode::Other(-1), "a probe thread panicked")
}

/// One round: a thread per entry of `variants`, each with its own installed stream, released
/// together by a barrier to launch its variant. Returns each thread's outcome: `Ok(true)` when
/// its output was exact; an error when a thread could not be started (the round did not run).
pub fn first_launch_round(
    device: Device,
    probe: Probe,
    variants: &[i32],
) -> Result<Vec<ThreadOutcome>, Error> {
    round_with_hitter(device, probe, variants, None).map(|(outcomes, _)| outcomes)
}

/// Like [`first_launch_round`], while one more thread keeps launching `warm_variant` (already
/// built) until the first-launchers are done. The second value is the hitter's outcome:
/// launches made, or the first error or inexact output.
pub fn round_with_hitter(
    device: Device,
    probe: Probe,
    variants: &[i32],
    warm_variant: Option<i32>,
) -> Result<(Vec<ThreadOutcome>, Option<HitterOutcome>), Error> {
    let total = variants.len() + usize::from(warm_variant.is_some());
    let gate = Gate::new(total);
    let done = AtomicBool::new(false);
    let (gate, done) = (&gate, &done);
    let not_started = |index: usize, e: std::io::Error| {
        gate.cancel();
        not_started(index, total, e)
    };
    std::thread::scope(|scope| {
        let hitter = match warm_variant {
            None => None,
            Some(warm) => {
                let spawned = std::thread::Builder::new()
                    .name("jb-race-hitter".into())
                    .spawn_scoped(scope, move || -> HitterOutcome {
                        let pass = gate.pass();
                        let input = Array::arange(device, PROBE_ELEMENTS, DType::F32)?;
                        if !pass.wait() {
                            return Err(cancelled());
                        }
                        let mut launches = 0;
                        // At least one launch, then as many as fit while the others build.
                        while launches == 0 || !done.load(Ordering::Acquire) {
                            if !probe_once(probe, warm, &input)? {
                                return Err(Error::new(
                                    ErrorCode::Other(-1),
                                    format!("warm variant {warm}: output not exact"),
                                ));
                            }
                            launches += 1;
                        }
                        Ok(launches)
                    });
                Some(spawned.map_err(|e| not_started(variants.len(), e))?)
            }
        };
        let mut workers = Vec::with_capacity(variants.len());
        for (index, &variant) in variants.iter().enumerate() {
            let spawned = std::thread::Builder::new()
                .name(format!("jb-race-{index}"))
                .spawn_scoped(scope, move || -> ThreadOutcome {
                    let pass = gate.pass();
                    let stream = streams::new_thread_local_generation_stream(device)?;
                    let _default = streams::install_thread_local_default_stream(&stream)?;
                    let input = Array::arange(device, PROBE_ELEMENTS, DType::F32)?;
                    if !pass.wait() {
                        return Err(cancelled());
                    }
                    probe_once(probe, variant, &input)
                });
            match spawned {
                Ok(worker) => workers.push(worker),
                Err(e) => {
                    let error = not_started(index, e);
                    // Started threads were released by the cancel; the scope joins them.
                    done.store(true, Ordering::Release);
                    return Err(error);
                }
            }
        }
        let outcomes: Vec<_> =
            workers.into_iter().map(|w| w.join().unwrap_or_else(|_| Err(panicked()))).collect();
        done.store(true, Ordering::Release);
        let hitter = hitter.map(|h| h.join().unwrap_or_else(|_| Err(panicked())));
        Ok((outcomes, hitter))
    })
}

#[cfg(test)]
mod tests {
    use super::Gate;

    #[test]
    fn gate_opens_when_all_arrive_and_a_dropped_pass_counts() {
        let gate = Gate::new(3);
        std::thread::scope(|s| {
            let waiters: Vec<_> = (0..2).map(|_| s.spawn(|| gate.pass().wait())).collect();
            drop(gate.pass()); // a thread that failed before the barrier
            assert!(waiters.into_iter().all(|w| w.join().unwrap()));
        });
    }

    #[test]
    fn cancelled_gate_releases_waiters_as_failed() {
        let gate = Gate::new(4);
        std::thread::scope(|s| {
            let waiters: Vec<_> = (0..2).map(|_| s.spawn(|| gate.pass().wait())).collect();
            gate.cancel(); // two threads were never started
            assert!(waiters.into_iter().all(|w| !w.join().unwrap()));
        });
    }
}
