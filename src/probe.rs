//! The race probe, backend-neutral: the kernel the concurrency tests first-launch from many
//! threads. The ROCm-only form the mission names is in `rocm_faults.rs`.

use crate::array::Array;
use crate::error::{Error, check};
use crate::ffi;

/// The race probe on the input's device, any backend: kernel
/// `mlxcel_jit_race_probe_v<variant>`, `out[i] = inp[i] * 2 + 1`, one block of n threads for an
/// f32 input of n elements (1 <= n <= 1024), variant >= 0.
pub fn jit_race_probe_array(input: &Array, variant: i32) -> Result<Array, Error> {
    let mut out = std::ptr::null_mut();
    // SAFETY: valid out pointer and live input.
    check(unsafe { ffi::jb_jit_race_probe_array(&mut out, input.raw(), variant) })?;
    Ok(Array::from_raw(out))
}
