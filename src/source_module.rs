//! Whole-source modules (CuPy's RawModule): the caller's complete source with several entry
//! points, each launched by name with arrays (in place) and scalars.

use crate::array::Array;
use crate::error::{Error, ErrorCode, c_str, check};
use crate::ffi;
use crate::kernel::{CompileOptions, LaunchShape, Scalar};
use crate::stream::Stream;
use std::ffi::CString;

/// Describes a whole-source module; start from `Default`. GPU source is CUDA C++ whose entries
/// are `extern "C" __global__` functions taking the launch's arguments in order (an array as its
/// device pointer, a scalar by value). cpu source is C11 whose entries are
/// `void name(void **args, uint64_t threads)`, `args[i]` pointing at argument i's value (an array:
/// `*(float **)args[0]`), each running every thread itself.
#[derive(Debug, Clone, Default)]
pub struct SourceModuleSpec<'a> {
    /// The module's name: a C identifier.
    pub name: &'a str,
    /// Source for the cpu device.
    pub cpu_source: Option<&'a str>,
    /// Source for cuda and rocm devices.
    pub gpu_source: Option<&'a str>,
    /// The entry points' names: each a function the source defines (a name it only uses, such
    /// as `memcpy`, fails the first launch with [`ErrorCode::Load`](crate::ErrorCode::Load)).
    pub entries: &'a [&'a str],
    /// Compile options; part of the module's identity.
    pub options: CompileOptions<'a>,
    /// Start the source with the dtype declarations custom kernels get (`bf16`,
    /// `f32_to_bf16`, ...).
    pub dtypes: bool,
}

/// An argument of a whole-source launch.
#[derive(Debug)]
pub enum Arg<'a> {
    /// An array the entry only reads.
    In(&'a Array),
    /// An array the entry writes: the write waits for the kernels on other streams that still
    /// read it; ready again once the entry has run.
    Out(&'a mut Array),
    /// A scalar by value.
    Scalar(Scalar),
}

impl<T: Into<Scalar>> From<T> for Arg<'_> {
    fn from(value: T) -> Self {
        Arg::Scalar(value.into())
    }
}

/// A whole-source module: compiled on first launch on a device, through the module cache and
/// the disk cache, named after its name plus a hash of its sources and options.
pub struct SourceModule {
    raw: *mut ffi::jb_source_module,
}

// SAFETY: a C source module is immutable once created and may be launched from several threads
// (jitbridge.h); the handle only owns it.
unsafe impl Send for SourceModule {}
// SAFETY: as above.
unsafe impl Sync for SourceModule {}

fn c_string(what: &str, s: &str) -> Result<CString, Error> {
    CString::new(s).map_err(|_| {
        Error::new(ErrorCode::InvalidArgument, format!("the {what} contains a NUL byte"))
    })
}

impl SourceModule {
    /// Validates and copies the spec; compiles nothing yet.
    pub fn new(spec: &SourceModuleSpec<'_>) -> Result<SourceModule, Error> {
        let name = c_string("module name", spec.name)?;
        let cpu = spec.cpu_source.map(|s| c_string("cpu source", s)).transpose()?;
        let gpu = spec.gpu_source.map(|s| c_string("gpu source", s)).transpose()?;
        let entries = spec
            .entries
            .iter()
            .map(|e| c_string("entry name", e))
            .collect::<Result<Vec<_>, _>>()?;
        let defines = spec
            .options
            .defines
            .iter()
            .map(|d| c_string("define", d))
            .collect::<Result<Vec<_>, _>>()?;
        let entry_ptrs: Vec<_> = entries.iter().map(|s| s.as_ptr()).collect();
        let define_ptrs: Vec<_> = defines.iter().map(|s| s.as_ptr()).collect();
        let raw_spec = ffi::jb_source_module_spec {
            struct_size: std::mem::size_of::<ffi::jb_source_module_spec>(),
            name: name.as_ptr(),
            cpu_source: cpu.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            gpu_source: gpu.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            entry_names: entry_ptrs.as_ptr(),
            num_entries: entry_ptrs.len(),
            compile_flags: spec.options.flags(),
            defines: define_ptrs.as_ptr(),
            num_defines: define_ptrs.len(),
            dtypes: spec.dtypes as i32,
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: every pointer lives until the call returns; the library copies.
        check(unsafe { ffi::jb_source_module_new(&mut raw, &raw_spec) })?;
        Ok(SourceModule { raw })
    }

    /// The module name: the name, '_', and 16 hex digits of the hash.
    pub fn module_name(&self) -> String {
        // SAFETY: the name lives as long as the module.
        c_str(unsafe { ffi::jb_source_module_name(self.raw) })
    }

    /// Launches `entry` on the thread's default stream of the arrays' device.
    pub fn launch(
        &self,
        entry: &str,
        args: &mut [Arg<'_>],
        shape: LaunchShape,
    ) -> Result<(), Error> {
        self.launch_raw(std::ptr::null_mut(), entry, args, shape)
    }

    /// Launches `entry` on `stream`.
    pub fn launch_on(
        &self,
        stream: &Stream,
        entry: &str,
        args: &mut [Arg<'_>],
        shape: LaunchShape,
    ) -> Result<(), Error> {
        self.launch_raw(stream.raw(), entry, args, shape)
    }

    fn launch_raw(
        &self,
        stream: *mut ffi::jb_stream,
        entry: &str,
        args: &mut [Arg<'_>],
        shape: LaunchShape,
    ) -> Result<(), Error> {
        let entry = c_string("entry name", entry)?;
        let none = Scalar::Bool(false).raw();
        let raw_args: Vec<ffi::jb_arg> = args
            .iter()
            .map(|a| match a {
                Arg::In(x) => ffi::jb_arg { array: x.raw(), written: 0, scalar: none },
                Arg::Out(x) => ffi::jb_arg { array: x.raw(), written: 1, scalar: none },
                Arg::Scalar(s) => {
                    ffi::jb_arg { array: std::ptr::null_mut(), written: 0, scalar: s.raw() }
                }
            })
            .collect();
        let raw_shape = shape.raw();
        // SAFETY: all pointers are valid for the call; written arrays are borrowed mutably, so
        // no other thread uses them meanwhile.
        check(unsafe {
            ffi::jb_source_module_launch(
                self.raw,
                stream,
                entry.as_ptr(),
                raw_args.as_ptr(),
                raw_args.len(),
                &raw_shape,
            )
        })
    }
}

impl Drop for SourceModule {
    fn drop(&mut self) {
        // SAFETY: we own it; built modules live on in the cache.
        unsafe { ffi::jb_source_module_free(self.raw) }
    }
}

impl std::fmt::Debug for SourceModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceModule").field("module", &self.module_name()).finish()
    }
}
