#![cfg(feature = "cuda")]
//! Runs in CI: the CUDA headers are there but no NVIDIA driver is. A cuda build must still start,
//! use the cpu, and say exactly what is missing when a CUDA device is asked for. Each test runs
//! in a child process: a build that crashes instead of answering fails with the signal named.

mod common;

use jitbridge::{DType, Device, DeviceKind, ErrorCode, gpu_backends};

fn cuda_devices() -> usize {
    let cuda = gpu_backends().into_iter().find(|b| b.name == "cuda").expect("cuda is listed");
    assert!(cuda.built, "a cuda build lists cuda as built");
    cuda.devices.unwrap_or(0)
}

#[test]
fn asking_for_a_missing_cuda_device_gives_a_clear_error() {
    if common::run_in_child("asking_for_a_missing_cuda_device_gives_a_clear_error", &[]).is_some() {
        return;
    }
    let n = cuda_devices();
    let err = Device::lookup(&format!("cuda:{n}")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NoDevice, "{err}");
    if n == 0 {
        // Either the driver library is missing (said by name, with what to install) or it
        // loaded, every symbol resolved, and the driver itself answered.
        let msg = err.message();
        assert!(msg.contains("cuda: "), "the message names the backend: {err}");
        // A call missing from the library (a wrong symbol name) reads "... has no cuX".
        assert!(!msg.contains(" has no "), "a call did not resolve: {err}");
        assert!(
            msg.contains("libcuda.so.1 not found (is the NVIDIA driver installed?)")
                || msg.contains("cuda: no device: cuInit failed")
                || msg.contains("set CUDA_PATH to the CUDA toolkit"),
            "the message says what is missing: {err}"
        );
        // "gpu" means cuda only when cuda has devices.
        if Device::count(DeviceKind::Gpu).unwrap() == 0 {
            let err = Device::gpu(0).unwrap_err();
            assert_eq!(err.code(), ErrorCode::NoDevice, "{err}");
            assert!(err.message().contains("cuda:"), "{err}");
        }
    }
}

#[test]
fn the_cpu_computes_and_is_the_default_without_a_gpu() {
    if common::run_in_child("the_cpu_computes_and_is_the_default_without_a_gpu", &[]).is_some() {
        return;
    }
    let default = Device::default_device().unwrap();
    if Device::count(DeviceKind::Gpu).unwrap() == 0 {
        assert_eq!(default.backend(), "cpu");
    } else {
        assert_eq!(default.spec(), Device::gpu(0).unwrap().spec());
    }
    let input = jitbridge::Array::arange(Device::cpu().unwrap(), 64, DType::F32).unwrap();
    let out = jitbridge::jit_race_probe_array(&input, 3_000_001).unwrap();
    let values: Vec<f32> = out.to_vec().unwrap();
    assert!(values.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32 + 1.0), "{values:?}");
}
