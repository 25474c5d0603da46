#![cfg(feature = "cuda")]
//! The mission's concurrency scenarios on GPU 0 of a CUDA build.

mod common;

jit_module_concurrency_tests!(jitbridge::Device::gpu(0).unwrap(), jitbridge::jit_race_probe_array);
