#![cfg(feature = "rocm")]
//! Runs in CI: HIP is installed there but no AMD GPU is, and asking for one must give a clear
//! error rather than a crash.

use jitbridge::{Device, DeviceKind, ErrorCode};

#[test]
fn asking_for_a_missing_gpu_gives_a_clear_error() {
    let gpus = Device::count(DeviceKind::Gpu).unwrap();
    let err = Device::gpu(gpus as i32).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NoDevice, "{err}");
    if gpus == 0 {
        assert!(err.message().contains("rocm"), "the message names the backend: {err}");
        // Without a GPU the cpu device still works and is the default.
        assert_eq!(Device::default_device().unwrap().backend(), "cpu");
    }
}
