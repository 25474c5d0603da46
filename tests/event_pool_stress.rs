//! The event pool under many threads: every array takes a pooled event for the work that makes
//! it and gives it back when dropped, so threads acquire and release all the time. An unlocked
//! pool hands one event to two arrays or loses one in a torn resize.

mod common;

use jitbridge::{Array, DType, Device, jit_race_probe_array, race};
use std::sync::{Arc, Barrier};

const THREADS: usize = 16;
const ITERATIONS: usize = 2000;

fn pool_churn(device: Device) {
    let _turn = common::serial();
    let input = Array::arange(device, race::PROBE_ELEMENTS, DType::F32).unwrap();
    jit_race_probe_array(&input, 4_000_000).unwrap().eval().unwrap();
    let barrier = Arc::new(Barrier::new(THREADS));
    std::thread::scope(|s| {
        for thread in 0..THREADS {
            let barrier = barrier.clone();
            s.spawn(move || {
                let input = Array::arange(device, race::PROBE_ELEMENTS, DType::F32).unwrap();
                barrier.wait();
                for iteration in 0..ITERATIONS {
                    // Several live arrays per thread, freed out of order.
                    let a = jit_race_probe_array(&input, 4_000_000).unwrap();
                    let b = jit_race_probe_array(&input, 4_000_000).unwrap();
                    drop(a);
                    let values = b.to_vec::<f32>().unwrap();
                    assert!(
                        race::probe_output_exact(&values),
                        "thread {thread} iteration {iteration}: output not exact"
                    );
                }
            });
        }
    });
}

#[test]
fn event_pool_shared_by_many_threads_cpu() {
    pool_churn(Device::cpu().unwrap());
}

#[cfg(any(feature = "cuda", feature = "rocm"))]
#[test]
fn event_pool_shared_by_many_threads_gpu() {
    pool_churn(Device::gpu(0).unwrap());
}
