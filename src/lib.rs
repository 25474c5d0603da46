//! jitbridge: kernels compiled at run time, kept in a process-global module cache that many
//! threads use at once, and launched on per-thread streams.
//!
//! The core is a C11 library (`cbridge/`); this crate wraps it in safe types. The cache follows
//! one protocol: a hit takes the shared lock and never inserts; a miss takes the exclusive lock,
//! looks again, and builds only if the key is still missing, so threads that first-launch one
//! kernel together get one build and the same module.
//!
//! ```
//! # unsafe { std::env::set_var("JITBRIDGE_DISK_CACHE", "off") };
//! use jitbridge::{Array, CompileOptions, CustomKernel, DType, Device, KernelSpec, LaunchShape};
//! let cpu = Device::cpu()?;
//! // SAFETY: the body only doubles, and subscripts its own arrays.
//! let twice = unsafe {
//!     CustomKernel::new(&KernelSpec {
//!         name: "twice",
//!         inputs: &[("x", DType::F32)],
//!         outputs: &[("y", DType::F32)],
//!         body: "y[thread_index()] = 2.0f * x[thread_index()];",
//!         options: CompileOptions { bounds_checks: true, ..Default::default() },
//!         ..Default::default()
//!     })?
//! };
//! let x = Array::arange(cpu, 256, DType::F32)?;
//! let y = twice.launch(&[&x], &[&[256]], LaunchShape::Threads(256))?;
//! assert!(y[0].to_vec::<f32>()?.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32));
//! # Ok::<(), jitbridge::Error>(())
//! ```
//!
//! # Safe and unsafe
//!
//! Every safe function of this crate is sound for every input. A kernel is C (or CUDA C++)
//! that the library compiles and runs, on the cpu inside this process, and no check can make
//! arbitrary C safe: a null pointer, a division by zero or a `free` of a made-up pointer
//! crashes whatever the library checks. So the caller vouches for a kernel's code once, where
//! it is made, and the library checks what it can at every launch:
//!
//! - [`CustomKernel::new`] is `unsafe`: its caller promises that the kernel's code does
//!   nothing undefined apart from subscripting the kernel's own arrays out of range (its
//!   `# Safety` section is the exact promise). Everything done with the kernel afterwards
//!   relies on it; [`CustomKernel::prepare`], which compiles and loads, is safe.
//! - Out-of-range subscripts are the library's business. [`CustomKernel::launch`],
//!   [`CustomKernel::launch_with`], [`Capture::launch`] and [`Graph::launch`] are safe and run
//!   only bounds-checked kernels ([`CompileOptions::bounds_checks`], or
//!   `JITBRIDGE_BOUNDS_CHECKS=1`), which catch every one: an [`ErrorCode::Bounds`] error at the
//!   next wait, never an access outside the array.
//! - [`CustomKernel::launch_unchecked`], [`CustomKernel::launch_with_unchecked`],
//!   [`Capture::launch_unchecked`] and [`Graph::launch_unchecked`] run any kernel and are
//!   `unsafe`: their caller promises that this launch subscripts only in range.
//! - [`SourceModule::new_declared`] is `unsafe`: its caller vouches for the module's sources and
//!   for the argument declarations that meet them. [`SourceModule::launch`] and
//!   [`SourceModule::launch_on`] are then safe for a declared entry, each launch checked
//!   against its declaration. [`SourceModule::new`] is safe because nothing it makes runs
//!   without a further promise: its entries launch only with the `unsafe`
//!   [`SourceModule::launch_unchecked`].
//!
//! The [`kernel_language`] page says what a body sees and what it means on every backend.
//!
//! ```compile_fail,E0133
//! # use jitbridge::*;
//! # fn f(kernel: &CustomKernel, x: &Array) {
//! // A launch the library cannot check does not compile outside `unsafe`.
//! let _ = kernel.launch_unchecked(&[x], &[&[4]], LaunchShape::Threads(4));
//! # }
//! ```
//!
//! ```compile_fail,E0133
//! # use jitbridge::*;
//! # fn f(spec: &SourceModuleSpec<'_>) {
//! // Neither does a module's declaration, the promise its safe launches rely on.
//! let _ = SourceModule::new_declared(spec, &[Signature::new("scale", &[])]);
//! # }
//! ```
#![warn(missing_docs)]

// The safe layer; each file says what it owns.
mod array;
mod cache;
mod callback;
mod counters;
mod coverage;
mod device;
mod dtype;
mod error;
mod events;
mod graph;
mod kernel;
mod launch;
mod logging;
mod module_code;
mod probe;
mod seal;
mod source_module;
mod stream;

pub mod disk_cache;
pub mod rocm_faults;

#[doc = include_str!(concat!(env!("OUT_DIR"), "/KERNELS.md"))]
pub mod kernel_language {}

/// README.md's Rust examples, compiled and run as doctests (build.rs copies the page).
#[cfg(doctest)]
#[doc = include_str!(concat!(env!("OUT_DIR"), "/README.md"))]
pub struct ReadmeDoctests;

// Public for the `jitbridge` command and the integration tests, kept off the API page: the raw
// declarations of both headers, the safe forms of jitbridge_sys.h's tool entry points, and the
// race-probe harness.
#[doc(hidden)]
pub mod ffi;
#[doc(hidden)]
pub mod race;
#[doc(hidden)]
pub mod sys_tools;

pub use array::Array;
pub use cache::{forget_build_failures, lookaside_enabled, set_lookaside_enabled};
pub use counters::{Counters, MemoryStats};
pub use device::{Device, DeviceKind, GpuBackend, cpu_compiler, gpu_backend, gpu_backends};
pub use dtype::{Bf16, DType, Element, F16, Scalar};
pub use error::{Error, ErrorCode};
pub use events::{
    CacheEvent, CacheEventKind, THREAD_TAG_MAX, clear_event_callback, set_event_callback,
    set_thread_tag, thread_tag,
};
pub use graph::{Capture, Graph, GraphArray, GraphInput, GraphLaunch, GraphOutput};
pub use kernel::{
    CompileOptions, ConfigureHook, CustomKernel, KernelAttributes, KernelConfig, KernelSpec,
    LaunchShape, Param,
};
pub use launch::{Launch, Output};
pub use logging::{clear_log_callback, set_log_callback};
pub use module_code::ModuleCode;
pub use probe::jit_race_probe_array;
pub use seal::{SealMode, seal, seal_mode};
pub use source_module::{Arg, ArgDecl, Signature, SourceModule, SourceModuleSpec};
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
        assert_send_sync::<Graph<'static>>();
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
