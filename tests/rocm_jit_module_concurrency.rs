#![cfg(feature = "rocm")]
//! The mission's concurrency scenarios on ROCm GPU 0, through the ROCm probe.
//!
//! A build with cuda too runs on NVIDIA hosts, where there is no ROCm GPU: there the scenarios
//! have nothing to run on, and asking for the device must say so cleanly (checked here).

mod common;

use jitbridge::{Device, ErrorCode, rocm_faults};

fn rocm_gpu() -> Option<Device> {
    match Device::lookup("rocm:0") {
        Ok(device) => Some(device),
        Err(err) if cfg!(feature = "cuda") => {
            assert_eq!(err.code(), ErrorCode::NoDevice, "{err}");
            assert!(err.message().contains("rocm: "), "{err}");
            eprintln!("no ROCm GPU, the ROCm scenarios did not run: {err}");
            None
        }
        Err(err) => panic!("a rocm build runs these on a ROCm GPU: {err}"),
    }
}

#[test]
fn same_kernel_first_launch_from_many_threads() {
    if let Some(device) = rocm_gpu() {
        common::same_kernel_first_launch_from_many_threads(
            device,
            rocm_faults::jit_race_probe_array,
            1_000_000,
        );
    }
}

#[test]
fn distinct_kernels_first_launch_while_others_hit_cache() {
    if let Some(device) = rocm_gpu() {
        common::distinct_kernels_first_launch_while_others_hit_cache(
            device,
            rocm_faults::jit_race_probe_array,
            2_000_000,
        );
    }
}
