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
