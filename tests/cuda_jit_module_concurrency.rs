#![cfg(feature = "cuda")]
//! The mission's concurrency scenarios on CUDA GPU 0.

mod common;

jit_module_concurrency_tests!(
    jitbridge::Device::lookup("cuda:0").unwrap(),
    jitbridge::jit_race_probe_array
);
