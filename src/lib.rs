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

mod array;
mod device;
mod error;
mod kernel;
mod stream;

pub mod race;

#[doc(hidden)]
pub mod ffi;
pub mod rocm_faults;

pub use array::{Array, DType, Element};
pub use device::{Device, DeviceKind, cpu_compiler, gpu_backend};
pub use error::{Error, ErrorCode};
pub use kernel::{ConfigureHook, CustomKernel, KernelConfig, KernelSpec, LaunchShape};
pub use stream::{DefaultStreamGuard, Stream, streams};

use error::check;

/// The race probe on the input's device, any backend: kernel
/// `mlxcel_jit_race_probe_v<variant>`, `out[i] = inp[i] * 2 + 1`, one block of n threads for an
/// f32 input of n elements (1 <= n <= 1024), variant >= 0.
pub fn jit_race_probe_array(input: &Array, variant: i32) -> Result<Array, Error> {
    let mut out = std::ptr::null_mut();
    // SAFETY: valid out pointer and live input.
    check(unsafe { ffi::jb_jit_race_probe_array(&mut out, input.raw(), variant) })?;
    Ok(Array::from_raw(out))
}

/// Per-process counters of the module cache. Laid out as the C `jb_counters`, field for field.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Modules compiled and loaded (disk cache hits are counted apart).
    pub builds: u64,
    /// Builds that failed; nothing was inserted for them.
    pub build_failures: u64,
    /// Lookups that found their module under the shared lock.
    pub hits: u64,
    /// Lookups that did not, and went on to the exclusive lock.
    pub misses: u64,
    /// Time spent building, in nanoseconds.
    pub build_ns: u64,
    /// Configure hooks that ran and succeeded.
    pub configures: u64,
    /// The most builds ever in progress at once since the last reset: 1 while the cache's
    /// exclusive lock serialises them, as it must.
    pub peak_concurrent_builds: u64,
    /// Builds served from the disk cache: the compiler was skipped.
    pub disk_hits: u64,
    /// Disk lookups that found no entry.
    pub disk_misses: u64,
    /// Entries found invalid, or refused by the loader, and replaced.
    pub disk_rejected: u64,
}

impl Counters {
    /// The counters now.
    pub fn read() -> Counters {
        let mut counters = Counters::default();
        // SAFETY: `counters` is a valid out pointer of the size passed, laid out as jb_counters.
        let status =
            unsafe { ffi::jb_counters_get(&mut counters, std::mem::size_of::<Counters>()) };
        debug_assert_eq!(status, ffi::JB_OK, "the C library's jb_counters is smaller than ours");
        counters
    }

    /// Sets every counter to zero (for tests and benchmarks).
    pub fn reset() {
        // SAFETY: no arguments; resets atomics.
        unsafe { ffi::jb_counters_reset() }
    }

    /// The change from `earlier` to `self` (the peak is kept as it is now: it is no sum).
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            builds: self.builds - earlier.builds,
            build_failures: self.build_failures - earlier.build_failures,
            hits: self.hits - earlier.hits,
            misses: self.misses - earlier.misses,
            build_ns: self.build_ns - earlier.build_ns,
            configures: self.configures - earlier.configures,
            peak_concurrent_builds: self.peak_concurrent_builds,
            disk_hits: self.disk_hits - earlier.disk_hits,
            disk_misses: self.disk_misses - earlier.disk_misses,
            disk_rejected: self.disk_rejected - earlier.disk_rejected,
        }
    }
}

/// Turns the per-thread lookaside in front of the module cache on or off (on by default). Off,
/// every lookup follows the locked protocol: for benchmarks of that protocol.
pub fn set_lookaside_enabled(enabled: bool) {
    // SAFETY: sets an atomic flag.
    unsafe { ffi::jb_set_lookaside_enabled(i32::from(enabled)) };
}

/// Whether the per-thread lookaside is on.
pub fn lookaside_enabled() -> bool {
    // SAFETY: reads an atomic flag.
    unsafe { ffi::jb_lookaside_enabled() != 0 }
}

/// The disk cache of compiled code: a new process loads what an earlier one compiled.
///
/// Folder: `$JITBRIDGE_CACHE_DIR`, else `$XDG_CACHE_HOME/jitbridge`, else
/// `~/.cache/jitbridge`, created 0700; `JITBRIDGE_DISK_CACHE=0` turns it off. A folder owned by
/// another user or writable by group or others is refused, and a read-only or full disk turns
/// the cache off, each with one warning; kernels still run.
pub mod disk_cache {
    use super::*;
    use crate::error::c_str;

    /// The folder ("" when none could be chosen).
    pub fn dir() -> String {
        let mut ptr = std::ptr::null();
        // SAFETY: valid out pointer; the string lives for the process.
        match check(unsafe { ffi::jb_disk_cache_dir(&mut ptr) }) {
            Ok(()) => c_str(ptr),
            Err(_) => String::new(),
        }
    }

    /// "on", or why the cache is off.
    pub fn state() -> String {
        // SAFETY: returns a library-owned string, copied at once.
        c_str(unsafe { ffi::jb_disk_cache_state() })
    }

    /// Entries and their total bytes.
    pub fn stats() -> Result<(u64, u64), Error> {
        let (mut entries, mut bytes) = (0, 0);
        // SAFETY: valid out pointers.
        check(unsafe { ffi::jb_disk_cache_stats(&mut entries, &mut bytes) })?;
        Ok((entries, bytes))
    }

    /// Removes entries, oldest first, until at most `max_bytes` remain; returns how many went.
    pub fn prune(max_bytes: u64) -> Result<u64, Error> {
        let mut removed = 0;
        // SAFETY: valid out pointer.
        check(unsafe { ffi::jb_disk_cache_prune(max_bytes, &mut removed) })?;
        Ok(removed)
    }

    /// Reads every entry: (well-formed, malformed).
    pub fn verify() -> Result<(u64, u64), Error> {
        let (mut valid, mut invalid) = (0, 0);
        // SAFETY: valid out pointers.
        check(unsafe { ffi::jb_disk_cache_verify(&mut valid, &mut invalid) })?;
        Ok((valid, invalid))
    }
}

/// Baselines for `jitbridge bench`; not for production paths.
pub mod bench_support {
    use super::*;

    /// Nanoseconds per bare backend launch of the probe plus an event record, into one
    /// preallocated output on the thread's default stream.
    pub fn raw_probe_launches(input: &Array, variant: i32, launches: i32) -> Result<f64, Error> {
        let mut ns = 0.0;
        // SAFETY: valid out pointer and live input.
        check(unsafe {
            ffi::jb_bench_raw_probe_launches(&mut ns, input.raw(), variant, launches)
        })?;
        Ok(ns)
    }

    /// Nanoseconds the backend's compiler alone takes for the kernel's source on `device`.
    pub fn compile_only(kernel: &CustomKernel, device: Device) -> Result<f64, Error> {
        let mut ns = 0.0;
        // SAFETY: valid out pointer, live kernel, library device.
        check(unsafe { ffi::jb_bench_compile_only(&mut ns, kernel.raw(), device.raw()) })?;
        Ok(ns)
    }
}

/// The locks a test-only build removed (bits: 1 jit cache, 2 event pool, 4 configure); 0 for
/// every normal build.
pub fn removed_locks() -> i32 {
    // SAFETY: no arguments.
    unsafe { ffi::jb_removed_locks() }
}

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
        let err = Array::arange(cpu, -1, DType::F32).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        assert!(err.to_string().contains("negative"), "{err}");
        let err = Device::get(DeviceKind::Cpu, 3).unwrap_err();
        assert_eq!(err.code(), ErrorCode::NoDevice);
    }
}
