//! Coverage: before a server seals ([`crate::seal`]), which kernels of a manifest (the file
//! `JITBRIDGE_MANIFEST` makes processes write) its launches would find without compiling, and
//! which would compile. Nothing is compiled or loaded.

use crate::device::Device;
use crate::error::{Error, c_path, c_str, catch_all, check};
use crate::ffi;
use std::os::raw::c_void;
use std::panic::AssertUnwindSafe;
use std::path::Path;

/// Where a launch on the device would get a kernel from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CoverageSource {
    /// This process's module cache.
    Memory,
    /// The cache folder, under the key this process makes.
    Disk,
    /// A bundle in use ([`crate::disk_cache::add_bundle`], `JITBRIDGE_CACHE_BUNDLE`).
    Bundle,
    /// Nowhere this process would look: it would compile ([`CoveredKernel::why`] says why).
    Compile,
    /// A kernel for another backend or architecture than the device's (with no device given:
    /// than any device of this host's): not checked.
    Other,
}

impl CoverageSource {
    fn from_raw(raw: i32) -> CoverageSource {
        match raw {
            ffi::JB_COVERAGE_MEMORY => Self::Memory,
            ffi::JB_COVERAGE_DISK => Self::Disk,
            ffi::JB_COVERAGE_BUNDLE => Self::Bundle,
            ffi::JB_COVERAGE_OTHER => Self::Other,
            _ => Self::Compile,
        }
    }

    /// "memory", "disk", "bundle", "compile" or "other".
    pub fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Disk => "disk",
            Self::Bundle => "bundle",
            Self::Compile => "compile",
            Self::Other => "other",
        }
    }
}

/// One kernel a manifest names, and where it would come from.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CoveredKernel {
    /// Where a launch would get it from.
    pub source: CoverageSource,
    /// The manifest's key: 64 hex digits.
    pub key: String,
    /// `cpu`, `cuda` or `rocm`.
    pub backend: String,
    /// The architecture: `x86_64-Linux`, `sm_90`, ...
    pub target: String,
    /// The module's name.
    pub module: String,
    /// Its entry points.
    pub entries: Vec<String>,
    /// Why it would compile, or why it is another device's; empty otherwise.
    pub why: String,
    /// The device it was checked on (`cpu:0`, `cuda:1`); empty for [`CoverageSource::Other`].
    pub device: String,
}

/// What [`coverage`] found: each kernel of the manifest once, in the manifest's order.
#[derive(Debug, Clone, Default)]
pub struct Coverage {
    /// The kernels.
    pub kernels: Vec<CoveredKernel>,
}

impl Coverage {
    /// The kernels that would come from `source`.
    pub fn count(&self, source: CoverageSource) -> usize {
        self.kernels.iter().filter(|k| k.source == source).count()
    }

    /// Whether sealing would refuse some kernel: one would compile.
    pub fn would_compile(&self) -> bool {
        self.count(CoverageSource::Compile) > 0
    }
}

unsafe extern "C" fn collect(user_data: *mut c_void, raw: *const ffi::jb_coverage_kernel) {
    catch_all(AssertUnwindSafe(|| {
        // SAFETY: user_data is the Vec `coverage` passes, alive and used by nothing else during
        // the call; the kernel and its strings are valid during it.
        let (kernels, raw) = unsafe { (&mut *(user_data as *mut Vec<CoveredKernel>), &*raw) };
        let entries = c_str(raw.entries);
        kernels.push(CoveredKernel {
            source: CoverageSource::from_raw(raw.source),
            key: c_str(raw.key),
            backend: c_str(raw.backend),
            target: c_str(raw.target),
            module: c_str(raw.module),
            entries: entries.split(',').map(str::to_string).collect(),
            why: c_str(raw.why),
            device: c_str(raw.device),
        });
    }));
}

/// Reads the manifest at `manifest` and says, for each kernel it names, where a launch would get
/// it from, compiling and loading nothing. Stored code counts only when its key is the one this
/// process makes (the same compiler, architecture and library ABI). With `device` `None`, each
/// kernel is checked on this host's device of the backend and architecture its line names (a
/// cpu kernel on the cpu, a cuda `sm_90` kernel on a cuda device of `sm_90`), where a worker
/// would launch it, and is [`CoverageSource::Other`] only when this host has no such device;
/// with `Some(device)`, only that device's kernels are checked. An error when the manifest
/// cannot be read.
///
/// ```no_run
/// let manifest = std::path::Path::new("kernels.manifest");
/// let coverage = jitbridge::disk_cache::coverage(None, manifest)?;
/// if !coverage.would_compile() {
///     jitbridge::seal(jitbridge::SealMode::Error)?;
/// }
/// # Ok::<(), jitbridge::Error>(())
/// ```
pub fn coverage(device: Option<Device>, manifest: &Path) -> Result<Coverage, Error> {
    let path = c_path(manifest)?;
    let mut kernels: Vec<CoveredKernel> = Vec::new();
    let mut counts = ffi::jb_coverage_result::default();
    // SAFETY: a valid out pointer, a device handle (devices live for the process) or NULL, a
    // NUL-terminated path; `collect` gets our Vec, used by nothing else meanwhile.
    check(unsafe {
        ffi::jb_cache_coverage(
            &mut counts,
            device.map_or(std::ptr::null_mut(), |d| d.raw()),
            path.as_ptr(),
            Some(collect),
            (&mut kernels as *mut Vec<CoveredKernel>).cast(),
        )
    })?;
    Ok(Coverage { kernels })
}
