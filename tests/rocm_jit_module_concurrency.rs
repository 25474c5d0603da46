#![cfg(feature = "rocm")]
//! The mission's concurrency scenarios on GPU 0 of a ROCm build, through the ROCm probe.

mod common;

jit_module_concurrency_tests!(
    jitbridge::Device::gpu(0).unwrap(),
    jitbridge::rocm_faults::jit_race_probe_array
);
