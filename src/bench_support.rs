//! Baselines for `jitbridge bench`; not for production paths, and not on the API page.

use crate::array::Array;
use crate::device::Device;
use crate::error::{Error, check};
use crate::ffi;
use crate::kernel::CustomKernel;

/// Nanoseconds per bare backend launch of the probe plus an event record, into one
/// preallocated output on the thread's default stream.
pub fn raw_probe_launches(input: &Array, variant: i32, launches: i32) -> Result<f64, Error> {
    let mut ns = 0.0;
    // SAFETY: valid out pointer and live input.
    check(unsafe { ffi::jb_bench_raw_probe_launches(&mut ns, input.raw(), variant, launches) })?;
    Ok(ns)
}

/// Nanoseconds the backend's compiler alone takes for the kernel's source on `device`.
pub fn compile_only(kernel: &CustomKernel, device: Device) -> Result<f64, Error> {
    let mut ns = 0.0;
    // SAFETY: valid out pointer, live kernel, library device.
    check(unsafe { ffi::jb_bench_compile_only(&mut ns, kernel.raw(), device.raw()) })?;
    Ok(ns)
}

/// Where one cold first launch of the probe spent its time, in nanoseconds; laid out exactly as
/// `jb_bench_cold_steps`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct ColdSteps {
    pub compile_ns: f64,
    pub load_ns: f64,
    pub get_function_ns: f64,
    pub disk_store_ns: f64,
    pub configure_ns: f64,
    pub stage_ns: f64,
    pub launch_ns: f64,
    pub record_ns: f64,
    pub sync_ns: f64,
    pub total_ns: f64,
    /// The compiler alone, right after, on the very same source and options: NVRTC answers it
    /// from its compute cache, so it is no baseline for a first compile.
    pub compile_again_ns: f64,
}

/// One first launch of the probe `variant` (not built yet), timed step by step.
pub fn cold_probe_steps(input: &Array, variant: i32) -> Result<ColdSteps, Error> {
    let mut steps = ColdSteps::default();
    // SAFETY: valid out pointer of the C layout, live input.
    check(unsafe { ffi::jb_bench_cold_probe_steps(&mut steps, input.raw(), variant) })?;
    Ok(steps)
}
