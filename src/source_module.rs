//! Whole-source modules (CuPy's RawModule): the caller's complete source with several entry
//! points, each launched by name with arrays (in place) and scalars. A declared entry is
//! launched safely (its arguments checked against its declaration); any entry with the unsafe
//! `_unchecked` launches.

use crate::array::Array;
use crate::device::Device;
use crate::dtype::DType;
use crate::dtype::Scalar;
use crate::error::{Error, ErrorCode, c_str, check};
use crate::ffi;
use crate::kernel::{CompileOptions, KernelAttributes, LaunchShape, c_string};
use crate::module_code::{ModuleCode, raw_code};
use crate::stream::Stream;

/// Describes a whole-source module; start from `Default`. GPU source is CUDA C++ whose entries
/// are `extern "C" __global__` functions taking the launch's arguments in order (an array as its
/// device pointer, a scalar by value). cpu source is C11 whose entries are
/// `void name(void **args, uint64_t threads)`, `args[i]` pointing at argument i's value (an array:
/// `*(float **)args[0]`), each running every thread itself. A declared entry (see
/// [`SourceModule::new_declared`]) is also given, after its declared arguments, each array
/// argument's element count as a `u64` (GPU: more `unsigned long long` parameters; cpu: more
/// `args[i]`).
#[derive(Debug, Clone, Default)]
pub struct SourceModuleSpec<'a> {
    /// The module's name: a C identifier.
    pub name: &'a str,
    /// Source for the cpu device.
    pub cpu_source: Option<&'a str>,
    /// Source for cuda and rocm devices.
    pub gpu_source: Option<&'a str>,
    /// Precompiled code for the cpu device instead of `cpu_source` (not both).
    pub cpu_code: Option<ModuleCode<'a>>,
    /// Precompiled code for cuda and rocm devices instead of `gpu_source` (not both).
    pub gpu_code: Option<ModuleCode<'a>>,
    /// The entry points' names: each a function the source defines (a name it only uses, such
    /// as `memcpy`, fails the first launch with [`ErrorCode::Load`](crate::ErrorCode::Load)).
    pub entries: &'a [&'a str],
    /// Compile options; part of the module's identity.
    pub options: CompileOptions<'a>,
    /// Start the source with the dtype declarations custom kernels get (`bf16`,
    /// `f32_to_bf16`, ...).
    pub dtypes: bool,
}

/// One declared argument of an entry point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgDecl {
    /// An array the entry only reads ([`Arg::In`]).
    In(DType),
    /// An array the entry writes, and may read ([`Arg::Out`]).
    Out(DType),
    /// A scalar by value ([`Arg::Scalar`]).
    Scalar(DType),
}

/// What an entry point takes: given to [`SourceModule::new_declared`] with the sources it
/// describes, it makes the entry's launches checked against it (count, array or scalar, read
/// or written, dtype) and safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signature<'a> {
    entry: &'a str,
    args: &'a [ArgDecl],
}

impl<'a> Signature<'a> {
    /// Entry `entry` takes `args`. A declaration alone promises nothing: the promise is made
    /// where it meets the sources, [`SourceModule::new_declared`].
    pub const fn new(entry: &'a str, args: &'a [ArgDecl]) -> Signature<'a> {
        Signature { entry, args }
    }

    /// The entry this declares.
    pub fn entry(&self) -> &'a str {
        self.entry
    }
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
    /// The entries with a declaration: launched safely.
    declared: Vec<String>,
}

// SAFETY: a C source module is immutable once created and may be launched from several threads
// (jitbridge.h); the handle only owns it.
unsafe impl Send for SourceModule {}
// SAFETY: as above.
unsafe impl Sync for SourceModule {}

impl SourceModule {
    /// Validates and copies the spec; compiles nothing yet. Its entries launch with the unsafe
    /// [`SourceModule::launch_unchecked`].
    pub fn new(spec: &SourceModuleSpec<'_>) -> Result<SourceModule, Error> {
        Self::make(spec, &[])
    }

    /// [`SourceModule::new`] with the entries in `signatures` declared: those launch with the
    /// safe [`SourceModule::launch`], each launch checked against its declaration.
    ///
    /// # Safety
    ///
    /// For each signature, in every source and precompiled code of `spec` (cpu and GPU; a file's
    /// contents as read when the module is made), its entry takes exactly its
    /// arguments, in order (an array as a pointer to elements of its dtype, a scalar by value of
    /// its dtype), then one `u64` element count per array argument, and, for every launch shape and
    /// every value of those arguments, reads only inside its arrays and the module's global
    /// variables, writes only inside its arrays (it bounds its indexes by the counts it is
    /// given, never by a scalar the caller picks), and writes only the arrays declared [`ArgDecl::Out`], a bool array only with 0 or 1. Beyond its arrays, a
    /// declared entry does nothing undefined (in C11 on the cpu, CUDA C++ / HIP on a GPU) for any
    /// such launch, and neither does any code of the sources (with the options' defines, include
    /// folders and compiler options) that runs when the compiled module is loaded (a cpu module's
    /// constructors; the first launch of any entry loads it), and the compiler options keep the
    /// platform's C ABI, which the library calls the entries with. The library checks each launch
    /// against the declaration; it cannot see inside the sources. ([`crate::CustomKernel::new`] is
    /// the same promise for a custom kernel.)
    pub unsafe fn new_declared(
        spec: &SourceModuleSpec<'_>,
        signatures: &[Signature<'_>],
    ) -> Result<SourceModule, Error> {
        Self::make(spec, signatures)
    }

    fn make(
        spec: &SourceModuleSpec<'_>,
        signatures: &[Signature<'_>],
    ) -> Result<SourceModule, Error> {
        let name = c_string("module name", spec.name)?;
        let cpu = spec.cpu_source.map(|s| c_string("cpu source", s)).transpose()?;
        let gpu = spec.gpu_source.map(|s| c_string("gpu source", s)).transpose()?;
        let entries = spec
            .entries
            .iter()
            .map(|e| c_string("entry name", e))
            .collect::<Result<Vec<_>, _>>()?;
        let options = spec.options.c_strings()?;
        let (cpu_code, _cpu_path) = raw_code(spec.cpu_code.as_ref())?;
        let (gpu_code, _gpu_path) = raw_code(spec.gpu_code.as_ref())?;
        let entry_ptrs: Vec<_> = entries.iter().map(|s| s.as_ptr()).collect();
        let decls = declarations(spec, signatures)?;
        let c_signatures: Vec<ffi::jb_entry_signature> = decls
            .iter()
            .map(|d| ffi::jb_entry_signature {
                declared: d.is_some() as i32,
                args: d.as_ref().map_or(std::ptr::null(), |a| a.as_ptr()),
                num_args: d.as_ref().map_or(0, |a| a.len()),
            })
            .collect();
        let raw_spec = ffi::jb_source_module_spec {
            struct_size: std::mem::size_of::<ffi::jb_source_module_spec>(),
            name: name.as_ptr(),
            cpu_source: cpu.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            gpu_source: gpu.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            entry_names: entry_ptrs.as_ptr(),
            num_entries: entry_ptrs.len(),
            compile_flags: spec.options.flags(),
            defines: options.define_ptrs.as_ptr(),
            num_defines: options.define_ptrs.len(),
            dtypes: spec.dtypes as i32,
            signatures: if signatures.is_empty() {
                std::ptr::null()
            } else {
                c_signatures.as_ptr()
            },
            compiler_options: options.option_ptrs.as_ptr(),
            num_compiler_options: options.option_ptrs.len(),
            include_dirs: options.include_ptrs.as_ptr(),
            num_include_dirs: options.include_ptrs.len(),
            target_arch: options.target_arch(),
            cpu_code,
            gpu_code,
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: every pointer lives until the call returns; the library copies.
        check(unsafe { ffi::jb_source_module_new(&mut raw, &raw_spec) })?;
        let declared = signatures.iter().map(|s| s.entry.to_string()).collect();
        Ok(SourceModule { raw, declared })
    }

    /// The module name: the name, '_', and 16 hex digits of the hash.
    pub fn module_name(&self) -> String {
        // SAFETY: the name lives as long as the module.
        c_str(unsafe { ffi::jb_source_module_name(self.raw) })
    }

    /// Launches the declared entry `entry` on the thread's default stream of the arrays'
    /// device; `args` are checked against its declaration. Safe: an entry without a
    /// [`Signature`] is an `InvalidArgument` error here (see
    /// [`SourceModule::launch_unchecked`]).
    pub fn launch(
        &self,
        entry: &str,
        args: &mut [Arg<'_>],
        shape: LaunchShape,
    ) -> Result<(), Error> {
        self.refuse_undeclared(entry)?;
        // SAFETY: the entry's declaration (an unsafe promise) covers every launch that the
        // library checks against it.
        unsafe { self.launch_raw(std::ptr::null_mut(), entry, args, shape) }
    }

    /// [`SourceModule::launch`] on `stream`.
    pub fn launch_on(
        &self,
        stream: &Stream,
        entry: &str,
        args: &mut [Arg<'_>],
        shape: LaunchShape,
    ) -> Result<(), Error> {
        self.refuse_undeclared(entry)?;
        // SAFETY: as in `launch`.
        unsafe { self.launch_raw(stream.raw(), entry, args, shape) }
    }

    /// Launches any entry, declared or not (a declared one's arguments are still checked).
    ///
    /// # Safety
    ///
    /// The entry takes exactly `args` (in number, order and type) and, run with them for every
    /// thread of `shape`, reads and writes only inside their arrays, writes only the arrays passed
    /// as [`Arg::Out`] (a bool array only with 0 or 1), writes no global variable of the module
    /// that a [`SourceModule::read_global`] may copy meanwhile, and does nothing else undefined; when this
    /// launch is the module's first on the device, neither does the code of the sources that
    /// loading it runs (a cpu module's constructors). The library cannot see the entry's
    /// parameters: on the cpu a mismatch or an access outside an array corrupts this process's
    /// memory.
    pub unsafe fn launch_unchecked(
        &self,
        entry: &str,
        args: &mut [Arg<'_>],
        shape: LaunchShape,
    ) -> Result<(), Error> {
        // SAFETY: the caller's promise.
        unsafe { self.launch_raw(std::ptr::null_mut(), entry, args, shape) }
    }

    /// [`SourceModule::launch_unchecked`] on `stream`.
    ///
    /// # Safety
    ///
    /// As for [`SourceModule::launch_unchecked`].
    pub unsafe fn launch_on_unchecked(
        &self,
        stream: &Stream,
        entry: &str,
        args: &mut [Arg<'_>],
        shape: LaunchShape,
    ) -> Result<(), Error> {
        // SAFETY: the caller's promise.
        unsafe { self.launch_raw(stream.raw(), entry, args, shape) }
    }

    /// Builds (or finds) the module on `device` and finds every entry, without launching: a
    /// compile error or a missing entry is reported here rather than at the first launch.
    /// Safe for a module made with [`SourceModule::new_declared`] (its promise covers the code
    /// that loading runs); an `InvalidArgument` error for any other (see
    /// [`SourceModule::prepare_unchecked`]).
    pub fn prepare(&self, device: Device) -> Result<(), Error> {
        self.refuse_unvouched("prepare_unchecked")?;
        // SAFETY: new_declared's promise covers the code that loading the module runs.
        unsafe { self.prepare_unchecked(device) }
    }

    /// [`SourceModule::prepare`] for any module.
    ///
    /// # Safety
    ///
    /// The code of the sources that loading the compiled module runs (a cpu module's
    /// constructors) does nothing undefined, as for a first [`SourceModule::launch_unchecked`].
    pub unsafe fn prepare_unchecked(&self, device: Device) -> Result<(), Error> {
        // SAFETY: live module and library device; the caller vouches for the load-time code.
        check(unsafe { ffi::jb_source_module_prepare(self.raw, device.raw()) })
    }

    /// Entry point `entry`'s [`KernelAttributes`] on `device`, the module built there first (as
    /// by [`SourceModule::prepare`]). An `InvalidArgument` error for an entry the module does not
    /// name, and for a module made with [`SourceModule::new`] (nothing vouches for its load-time
    /// code).
    pub fn attributes(&self, device: Device, entry: &str) -> Result<KernelAttributes, Error> {
        self.refuse_unvouched("prepare_unchecked first")?;
        let entry = c_string("entry name", entry)?;
        let mut raw = ffi::jb_kernel_attributes::default();
        // SAFETY: live module and device; new_declared's promise covers the load-time code.
        check(unsafe {
            ffi::jb_source_module_attributes(self.raw, device.raw(), entry.as_ptr(), &mut raw)
        })?;
        Ok(KernelAttributes::from_raw(raw))
    }

    /// The size in bytes of global variable `name` of the module on `device` (built there
    /// first, as by [`SourceModule::prepare`]): on a GPU a `__device__` or `__constant__`
    /// variable, on the cpu one with external linkage (not `static`). An `InvalidArgument` error
    /// for a name that is not a C identifier or that the module does not define as a variable,
    /// and for a module made with [`SourceModule::new`] (nothing vouches for its load-time code).
    pub fn global_size(&self, device: Device, name: &str) -> Result<usize, Error> {
        self.refuse_unvouched("prepare_unchecked first")?;
        let name = c_string("global name", name)?;
        let mut size = 0usize;
        // SAFETY: live module and device; new_declared's promise covers the load-time code.
        check(unsafe {
            ffi::jb_source_module_global_size(self.raw, device.raw(), name.as_ptr(), &mut size)
        })?;
        Ok(size)
    }

    /// Copies `out.len()` bytes of global `name` at byte `offset` into `out`, after the work
    /// queued so far on the thread's default stream of `device` (work on other streams is not
    /// waited for). Bytes past the variable's end are an `InvalidArgument` error, with nothing
    /// copied; otherwise as [`SourceModule::global_size`].
    pub fn read_global(
        &self,
        device: Device,
        name: &str,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), Error> {
        self.read_global_raw(device.raw(), std::ptr::null_mut(), name, offset, out)
    }

    /// [`SourceModule::read_global`] after the work queued so far on `stream`.
    pub fn read_global_on(
        &self,
        stream: &Stream,
        name: &str,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), Error> {
        self.read_global_raw(std::ptr::null_mut(), stream.raw(), name, offset, out)
    }

    fn read_global_raw(
        &self,
        device: *mut ffi::jb_device,
        stream: *mut ffi::jb_stream,
        name: &str,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), Error> {
        self.refuse_unvouched("prepare_unchecked first")?;
        let name = c_string("global name", name)?;
        // SAFETY: `out` is writable for its length; the library checks the range against the
        // variable's size. No kernel of a declared module writes a global (new_declared's
        // promise), and an unchecked launch or write promises not to race this copy.
        check(unsafe {
            ffi::jb_source_module_global_read(
                self.raw,
                device,
                stream,
                name.as_ptr(),
                offset,
                out.as_mut_ptr().cast(),
                out.len(),
            )
        })
    }

    /// Copies `bytes` into global `name` at byte `offset` on `device`, after the work queued so
    /// far on the thread's default stream of the device and before its later launches. Bytes
    /// past the variable's end, and a `const` variable of a cpu module, are an
    /// `InvalidArgument` error, with nothing written; otherwise as
    /// [`SourceModule::global_size`], for any module.
    ///
    /// # Safety
    ///
    /// Every entry launched after the write, and run for every launch it is given, does nothing
    /// undefined with the variable holding these bytes (a pointer, an index or a bool a global
    /// holds is the caller's to keep valid: no check sees it); no kernel on another stream reads
    /// or writes the variable while the copy runs, nor does another thread's read or write of it;
    /// and, if this is the module's first use on the device, the code that loading it runs does
    /// nothing undefined (as for [`SourceModule::prepare_unchecked`]).
    pub unsafe fn write_global(
        &self,
        device: Device,
        name: &str,
        offset: usize,
        bytes: &[u8],
    ) -> Result<(), Error> {
        // SAFETY: the caller's promise.
        unsafe { self.write_global_raw(device.raw(), std::ptr::null_mut(), name, offset, bytes) }
    }

    /// [`SourceModule::write_global`] ordered on `stream`.
    ///
    /// # Safety
    ///
    /// As for [`SourceModule::write_global`].
    pub unsafe fn write_global_on(
        &self,
        stream: &Stream,
        name: &str,
        offset: usize,
        bytes: &[u8],
    ) -> Result<(), Error> {
        // SAFETY: the caller's promise.
        unsafe { self.write_global_raw(std::ptr::null_mut(), stream.raw(), name, offset, bytes) }
    }

    /// # Safety
    ///
    /// As for [`SourceModule::write_global`].
    unsafe fn write_global_raw(
        &self,
        device: *mut ffi::jb_device,
        stream: *mut ffi::jb_stream,
        name: &str,
        offset: usize,
        bytes: &[u8],
    ) -> Result<(), Error> {
        let name = c_string("global name", name)?;
        // SAFETY: `bytes` is readable for its length; the library checks the range and that
        // the variable is writable; the caller vouches for what the kernels do with it.
        check(unsafe {
            ffi::jb_source_module_global_write(
                self.raw,
                device,
                stream,
                name.as_ptr(),
                offset,
                bytes.as_ptr().cast(),
                bytes.len(),
            )
        })
    }

    /// An error unless `new_declared`'s promise covers the code that loading the module runs;
    /// `unchecked` names the unsafe way round.
    fn refuse_unvouched(&self, unchecked: &str) -> Result<(), Error> {
        if !self.declared.is_empty() {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::InvalidArgument,
            format!(
                "module '{}' declares no entry, so nothing vouches for the code that loading it \
                 runs: make it with SourceModule::new_declared, or use the unsafe {unchecked}",
                self.module_name()
            ),
        ))
    }

    fn refuse_undeclared(&self, entry: &str) -> Result<(), Error> {
        if self.declared.iter().any(|d| d == entry) {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::InvalidArgument,
            format!(
                "entry '{entry}' of module '{}' has no Signature, so a safe launch cannot check \
                 its arguments: declare it with SourceModule::new_declared, or launch it with \
                 the unsafe launch_unchecked",
                self.module_name()
            ),
        ))
    }

    /// # Safety
    ///
    /// The entry, run with `args` for `shape`, stays inside its arrays (a declared entry's
    /// declaration promises it for every launch the library checks against it).
    unsafe fn launch_raw(
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

/// Each entry's declared arguments in the C form, in entry order (`None`: undeclared).
fn declarations(
    spec: &SourceModuleSpec<'_>,
    signatures: &[Signature<'_>],
) -> Result<Vec<Option<Vec<ffi::jb_arg_decl>>>, Error> {
    let mut decls: Vec<Option<Vec<ffi::jb_arg_decl>>> = vec![None; spec.entries.len()];
    for sig in signatures {
        let at = spec.entries.iter().position(|e| *e == sig.entry).ok_or_else(|| {
            Error::new(
                ErrorCode::InvalidArgument,
                format!("module '{}': a signature names '{}', not an entry", spec.name, sig.entry),
            )
        })?;
        if decls[at].is_some() {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!("module '{}': entry '{}' is declared twice", spec.name, sig.entry),
            ));
        }
        let args = sig.args.iter().map(|a| {
            let (role, dtype) = match *a {
                ArgDecl::In(d) => (ffi::JB_ARG_IN, d),
                ArgDecl::Out(d) => (ffi::JB_ARG_OUT, d),
                ArgDecl::Scalar(d) => (ffi::JB_ARG_SCALAR, d),
            };
            ffi::jb_arg_decl { role, dtype: dtype.raw() }
        });
        decls[at] = Some(args.collect());
    }
    Ok(decls)
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
