//! jitbridge: kernels compiled at run time, kept in a process-global module cache that many
//! threads use at once, and launched on per-thread streams.
//!
//! The core is a C11 library (`cbridge/`); this crate wraps it in safe types. The cache follows
//! one protocol: a hit takes the shared lock and never inserts; a miss takes the exclusive lock,
//! looks again, and builds only if the key is still missing, so threads that first-launch one
//! kernel together get one build and the same module.
//!
//! ```
//! use jitbridge::{Array, DType, Device};
//! let x = Array::arange(Device::cpu()?, 256, DType::F32)?;
//! let y = jitbridge::jit_race_probe_array(&x, 0)?;
//! let values = y.to_vec::<f32>()?;
//! assert!(values.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32 + 1.0));
//! # Ok::<(), jitbridge::Error>(())
//! ```
#![warn(missing_docs)]

// The safe layer; each file says what it owns.
mod array;
mod cache;
mod counters;
mod device;
mod error;
mod kernel;
mod logging;
mod probe;
mod source_module;
mod stream;

pub mod disk_cache;
pub mod rocm_faults;

// Public for the `jitbridge` command and the integration tests, kept off the API page: the raw
// declarations of both headers, the safe forms of jitbridge_sys.h's tool entry points, and the
// race-probe harness.
#[doc(hidden)]
pub mod ffi;
#[doc(hidden)]
pub mod race;
#[doc(hidden)]
pub mod sys_tools;

pub use array::{Array, Bf16, DType, Element, F16};
pub use cache::{forget_build_failures, lookaside_enabled, set_lookaside_enabled};
pub use counters::{Counters, MemoryStats};
pub use device::{Device, DeviceKind, GpuBackend, cpu_compiler, gpu_backend, gpu_backends};
pub use error::{Error, ErrorCode};
pub use kernel::{
    CompileOptions, ConfigureHook, CustomKernel, KernelConfig, KernelSpec, LaunchShape, Param,
    Scalar,
};
pub use logging::{clear_log_callback, set_log_callback};
pub use probe::jit_race_probe_array;
pub use source_module::{Arg, SourceModule, SourceModuleSpec};
pub use stream::{DefaultStreamGuard, Stream, streams};

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn public_handles_are_send_and_sync_as_documented() {
        assert_send_sync::<Device>();
        assert_send_sync::<Stream>();
        assert_send_sync::<Array>();
        assert_send_sync::<CustomKernel>();
        assert_send_sync::<Error>();
    }

    #[test]
    fn errors_carry_code_and_message() {
        let cpu = Device::cpu().unwrap();
        // Sizes are usize: one C's int64_t cannot hold is refused before the call.
        let err = Array::arange(cpu, usize::MAX, DType::F32).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Shape);
        assert!(err.to_string().contains("too large"), "{err}");
        let err = Array::from_slice(cpu, &[1.0f32; 4], &[2, usize::MAX]).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Shape);
        let err = Device::get(DeviceKind::Cpu, 3).unwrap_err();
        assert_eq!(err.code(), ErrorCode::NoDevice);
    }
}
