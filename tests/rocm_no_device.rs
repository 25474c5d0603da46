#![cfg(feature = "rocm")]
//! Runs in CI: HIP is installed there but no AMD GPU is, and asking for one must give a clear
//! error rather than a crash. Where HIP is installed, libamdhip64 must load and every call the
//! backend makes must resolve in it: the driver itself then says there is no device. The test
//! runs in a child process: a build that crashes instead of answering fails with the signal
//! named.

mod common;

use jitbridge::{Device, DeviceKind, ErrorCode, gpu_backends};

#[test]
fn asking_for_a_missing_gpu_gives_a_clear_error() {
    if common::run_in_child("asking_for_a_missing_gpu_gives_a_clear_error", &[]).is_some() {
        return;
    }
    let rocm = gpu_backends().into_iter().find(|b| b.name == "rocm").expect("rocm is listed");
    assert!(rocm.built, "a rocm build lists rocm as built");
    let n = rocm.devices.unwrap_or(0);
    let err = Device::lookup(&format!("rocm:{n}")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NoDevice, "{err}");
    if n == 0 {
        let msg = err.message();
        assert!(msg.contains("rocm: "), "the message names the backend: {err}");
        // A call missing from the library (a wrong symbol name) reads "... has no hipX".
        assert!(!msg.contains(" has no "), "a call did not resolve: {err}");
        assert!(
            msg.contains("rocm: no device: hipInit failed")
                || msg.contains("not found (is ROCm installed? set ROCM_PATH)"),
            "the driver's answer, or what to install: {err}"
        );
        if Device::count(DeviceKind::Gpu).unwrap() == 0 {
            // Without a GPU the cpu device still works and is the default.
            assert_eq!(Device::default_device().unwrap().backend(), "cpu");
        }
    }
}
