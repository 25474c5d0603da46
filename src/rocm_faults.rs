//! The ROCm race probe, as the server that met the cache race calls it.

use crate::array::Array;
use crate::error::{Error, check};
use crate::ffi;

/// Runs the race probe kernel `mlxcel_jit_race_probe_v<variant>` (out = inp * 2 + 1) on the
/// input's GPU. Only a ROCm build (feature `rocm`) runs it, and only on a ROCm GPU; elsewhere it
/// returns [`ErrorCode::Unsupported`](crate::ErrorCode::Unsupported) naming what is missing. The
/// backend-neutral form is [`crate::jit_race_probe_array`].
///
/// ```
/// let x = jitbridge::Array::arange(jitbridge::Device::cpu()?, 4, jitbridge::DType::F32)?;
/// let err = jitbridge::rocm_faults::jit_race_probe_array(&x, 0).unwrap_err();
/// assert_eq!(err.code(), jitbridge::ErrorCode::Unsupported);
/// # Ok::<(), jitbridge::Error>(())
/// ```
pub fn jit_race_probe_array(input: &Array, variant: i32) -> Result<Array, Error> {
    let mut out = std::ptr::null_mut();
    // SAFETY: valid out pointer and live input.
    check(unsafe { ffi::jb_rocm_jit_race_probe_array(&mut out, input.raw(), variant) })?;
    Ok(Array::from_raw(out))
}
