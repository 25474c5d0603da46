//! Custom kernels: a body the library wraps into a whole kernel for the device's backend. The
//! launches are in `launch.rs`.

use crate::device::Device;
use crate::dtype::{DType, Scalar};
use crate::error::{Error, ErrorCode, c_str, check};
use crate::ffi;
use std::ffi::CString;
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

/// What a configure hook decides for a kernel on one device before its first launch there.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KernelConfig {
    /// Threads per block for launches given as a thread count (0 keeps the default, 256).
    pub threads_per_block: u32,
    /// Dynamic shared memory per block, in bytes (GPU only).
    pub shared_memory_bytes: u32,
}

/// A compiled kernel's attributes on one device (CuPy's `RawKernel.attributes`). On a GPU the
/// driver's values; on the cpu, where a kernel is a C function, registers, shared and local
/// bytes are 0 (not applicable) and the block limit is the launch's, 1024 (see the
/// `kernel_language` page).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KernelAttributes {
    /// Registers per thread.
    pub registers: u32,
    /// The most threads a launch of this kernel may put in one block.
    pub max_threads_per_block: u32,
    /// The `__shared__` memory the kernel declares, in bytes.
    pub static_shared_bytes: usize,
    /// Local memory per thread (spilled registers, local arrays), in bytes.
    pub local_bytes: usize,
}

impl KernelAttributes {
    pub(crate) fn from_raw(raw: ffi::jb_kernel_attributes) -> Self {
        // The library never gives negative counts (it refuses a driver's).
        KernelAttributes {
            registers: u32::try_from(raw.registers).unwrap_or(0),
            max_threads_per_block: u32::try_from(raw.max_threads_per_block).unwrap_or(0),
            static_shared_bytes: raw.static_shared_bytes,
            local_bytes: raw.local_bytes,
        }
    }
}

/// A one-time configure hook: runs once per kernel per device, before the first launch there,
/// under that kernel's configure lock. `None` fails the launch (the next launch tries again).
/// It may capture state; it lives as long as the kernel.
pub type ConfigureHook = Arc<dyn Fn(Device) -> Option<KernelConfig> + Send + Sync>;

/// A compile-time parameter's value: substituted into the source (`#define NAME value`, or
/// `typedef <dtype> NAME;`), so each value is its own module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// An integer constant.
    Int(i64),
    /// 1 or 0.
    Bool(bool),
    /// A type name standing for this dtype.
    DType(DType),
}

/// Compile options of a kernel: part of its identity (module name and disk cache key).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CompileOptions<'a> {
    /// Fast math (cpu `-ffast-math`, cuda `--use_fast_math`).
    pub fast_math: bool,
    /// Line information for profilers and debuggers (cpu `-g`, cuda `-lineinfo`).
    pub line_info: bool,
    /// Custom kernels only: every subscript of an array (and of a shape) in the body and header
    /// is checked. An out-of-range subscript is the one thing the caller of
    /// [`CustomKernel::new`] does not promise against; caught here, it leaves the kernel's
    /// launches safe ([`CustomKernel::launch`]). An index out of range reads 0 and writes
    /// nothing, and the first one of a launch is an [`ErrorCode::Bounds`] error at the next
    /// wait for what the launch wrote, naming the kernel, the array, the index and the thread.
    /// The body and header may name an array only to subscript it, and may hold nothing that
    /// could reach one past the checks (the [`crate::kernel_language`] page lists what is
    /// refused, and what no check can see). `JITBRIDGE_BOUNDS_CHECKS=1` turns this on for every
    /// kernel of a process.
    pub bounds_checks: bool,
    /// `"NAME"` or `"NAME=VALUE"`: `#define` lines at the top of the source.
    pub defines: &'a [&'a str],
    /// More options for the backend's compiler (`$CC`; NVRTC or hiprtc), each one argument
    /// starting with `-`, passed as it is, never through a shell. An option that moves the
    /// output, runs or links something, passes options on (`-Wp,`, `-Wa,`, `-Xpreprocessor`,
    /// `-Xclang`), reads the source otherwise than the bounds checks (`-finput-charset`,
    /// `-trigraphs`, `-traditional`), leaves the ABI the library calls the code with
    /// (`-mabi`, `-fcall-used-`, `-ffixed-`, `-fpack-struct`, `-m32`, ...; `-fsanitize`), or
    /// has its own field (`-o`, `-c`, `-B`, `-fplugin`, `-l`, `-D`: `defines`, `-I`:
    /// `include_dirs`, `-march`: `target_arch`, ...) is refused.
    /// Refused, with `include_dirs`, in a setuid program.
    pub compiler_options: &'a [&'a str],
    /// Absolute folders searched for `#include`, each (and every folder above it) writable by
    /// this user and root alone. With include folders the compiled code is never kept on disk:
    /// the key cannot hold their headers' contents.
    pub include_dirs: &'a [&'a str],
    /// The architecture to compile for instead of the device's: GPUs `"sm_90"`,
    /// `"compute_90"`, `"gfx90a"`; the cpu `-march`'s value (`"native"`, `"x86-64-v3"`).
    pub target_arch: Option<&'a str>,
}

impl CompileOptions<'_> {
    pub(crate) fn flags(&self) -> u32 {
        (if self.fast_math { ffi::JB_COMPILE_FAST_MATH } else { 0 })
            | (if self.line_info { ffi::JB_COMPILE_LINE_INFO } else { 0 })
            | if self.bounds_checks { ffi::JB_COMPILE_BOUNDS_CHECKS } else { 0 }
    }

    /// The strings as the C specs take them.
    pub(crate) fn c_strings(&self) -> Result<COptions, Error> {
        let all = |what: &str, items: &[&str]| -> Result<Vec<CString>, Error> {
            items.iter().map(|s| c_string(what, s)).collect()
        };
        let defines = all("define", self.defines)?;
        let compiler_options = all("compiler option", self.compiler_options)?;
        let include_dirs = all("include folder", self.include_dirs)?;
        let target_arch = self.target_arch.map(|a| c_string("target_arch", a)).transpose()?;
        Ok(COptions {
            define_ptrs: defines.iter().map(|s| s.as_ptr()).collect(),
            option_ptrs: compiler_options.iter().map(|s| s.as_ptr()).collect(),
            include_ptrs: include_dirs.iter().map(|s| s.as_ptr()).collect(),
            _strings: [defines, compiler_options, include_dirs],
            target_arch,
        })
    }
}

/// Compile options' strings for a C spec; the pointers point into `_strings`, whose heap
/// buffers stay put when this value moves.
pub(crate) struct COptions {
    pub(crate) define_ptrs: Vec<*const std::os::raw::c_char>,
    pub(crate) option_ptrs: Vec<*const std::os::raw::c_char>,
    pub(crate) include_ptrs: Vec<*const std::os::raw::c_char>,
    _strings: [Vec<CString>; 3],
    target_arch: Option<CString>,
}

impl COptions {
    pub(crate) fn target_arch(&self) -> *const std::os::raw::c_char {
        self.target_arch.as_ref().map_or(std::ptr::null(), |a| a.as_ptr())
    }
}

impl LaunchShape {
    pub(crate) fn raw(self) -> ffi::jb_launch_shape {
        match self {
            LaunchShape::Threads(n) => {
                ffi::jb_launch_shape { total_threads: n as u64, ..Default::default() }
            }
            LaunchShape::Grid { grid, block } => {
                ffi::jb_launch_shape { grid, block, total_threads: 0 }
            }
        }
    }
}

/// Describes a custom kernel; start from `Default` and set what is needed. In the body,
/// `thread_index()` is the thread's global index, each input `x` is a const pointer of its
/// dtype with `x_size` elements, each output `y` a writable pointer with `y_size`, and each
/// scalar a value; a body that names `x_shape` or `x_ndim` also sees that array's dimensions.
/// `return` ends one thread. The dtype names (`f32`, `bf16`, ...) are types in the body; `f16`
/// and `bf16` are arithmetic (computed in f32, rounded to nearest even where stored or cast) on
/// GPUs and where the cpu compiler has `_Float16` and `__bf16`, else 16-bit storage types; all
/// convert with `f16_to_f32`, `f32_to_f16`, `bf16_to_f32`, `f32_to_bf16`. A dtype parameter
/// (`Param::DType`) makes one body serve several dtypes. Threads that meet in one element use
/// `atomic_add(y, i, v)`, `atomic_exchange`, `atomic_min` and `atomic_max` (f32, i32, u32, i64
/// and u64 outputs; each returns the old value). The crate documentation's "The kernel
/// language" says the rest.
#[derive(Clone, Default)]
pub struct KernelSpec<'a> {
    /// The kernel's name: a C identifier.
    pub name: &'a str,
    /// Input names (C identifiers) and dtypes.
    pub inputs: &'a [(&'a str, DType)],
    /// Output names (C identifiers) and dtypes.
    pub outputs: &'a [(&'a str, DType)],
    /// Initial values of new outputs, by output name: every element holds its value before the
    /// body runs (MLX's `init_value`). Other new outputs are not initialised: their elements
    /// hold whatever the memory held, not zeros; but bool outputs start false (a C `bool` that
    /// is neither 0 nor 1 is undefined to read). Outputs written in place keep their contents.
    pub output_inits: &'a [(&'a str, Scalar)],
    /// Scalar arguments passed by value at each launch: names and dtypes.
    pub scalars: &'a [(&'a str, DType)],
    /// Compile-time parameters: names and values.
    pub params: &'a [(&'a str, Param)],
    /// Statements every thread runs.
    pub body: &'a str,
    /// Source pasted before the kernel (helper functions), if any.
    pub header: Option<&'a str>,
    /// Compile options.
    pub options: CompileOptions<'a>,
    /// A one-time configure hook, if any.
    pub configure: Option<ConfigureHook>,
}

impl std::fmt::Debug for KernelSpec<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelSpec")
            .field("name", &self.name)
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .field("output_inits", &self.output_inits)
            .field("scalars", &self.scalars)
            .field("params", &self.params)
            .field("body", &self.body)
            .field("header", &self.header)
            .field("options", &self.options)
            .field("configure", &self.configure.is_some())
            .finish()
    }
}

/// How many threads a launch runs. No threads (`Threads(0)`, or a grid with a 0 dimension) is
/// an empty batch: the launch checks its arguments and returns its outputs (empty, or in place
/// and unchanged) without running the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchShape {
    /// This many threads in blocks of the configured size (256 unless a hook says otherwise).
    Threads(usize),
    /// An explicit grid of blocks and block of threads (each block dimension at least 1).
    Grid {
        /// Blocks in x, y, z.
        grid: [u32; 3],
        /// Threads per block in x, y, z.
        block: [u32; 3],
    },
}

/// No threads, an empty batch: a launch says how many (the default only lets
/// [`crate::Launch`] start from `Default`).
impl Default for LaunchShape {
    fn default() -> Self {
        LaunchShape::Threads(0)
    }
}

/// A compiled-on-first-use kernel. Its module is named after the kernel plus a hash of the
/// generated source, so two bodies under one name never share a module. Made with the `unsafe`
/// [`CustomKernel::new`], whose caller vouches for the kernel's code; launched with the safe
/// [`CustomKernel::launch`] when bounds-checked, else with the `unsafe`
/// [`CustomKernel::launch_unchecked`] (the crate documentation's "Safe and unsafe" says why).
///
/// ```
/// # // Doc tests keep off the user's disk cache; nothing else runs yet.
/// # unsafe { std::env::set_var("JITBRIDGE_DISK_CACHE", "off") };
/// use jitbridge::{Array, CompileOptions, CustomKernel, DType, Device, KernelSpec, LaunchShape};
/// // SAFETY: the body only adds, and subscripts its own arrays.
/// let kernel = unsafe {
///     CustomKernel::new(&KernelSpec {
///         name: "add_one",
///         inputs: &[("x", DType::F32)],
///         outputs: &[("y", DType::F32)],
///         body: "y[thread_index()] = x[thread_index()] + 1.0f;",
///         options: CompileOptions { bounds_checks: true, ..Default::default() },
///         ..Default::default()
///     })?
/// };
/// let x = Array::from_slice(Device::cpu()?, &[1.0f32, 2.0, 3.0], &[3])?;
/// let y = kernel.launch(&[&x], &[&[3]], LaunchShape::Threads(3))?;
/// assert_eq!(y[0].to_vec::<f32>()?, [2.0, 3.0, 4.0]);
/// # Ok::<(), jitbridge::Error>(())
/// ```
pub struct CustomKernel {
    raw: *mut ffi::jb_custom_kernel,
    pub(crate) num_outputs: usize,
    /// The hook the C kernel's user data points at; dropped after the C kernel.
    _hook: Option<Box<ConfigureHook>>,
}

// SAFETY: a C custom kernel is immutable once created, and launching it from several threads
// at once is allowed (jitbridge.h); the handle only owns it.
unsafe impl Send for CustomKernel {}
// SAFETY: as above.
unsafe impl Sync for CustomKernel {}

pub(crate) fn c_string(what: &str, s: &str) -> Result<CString, Error> {
    CString::new(s).map_err(|_| {
        Error::new(ErrorCode::InvalidArgument, format!("the {what} contains a NUL byte"))
    })
}

unsafe extern "C" fn configure_trampoline(
    user_data: *mut c_void,
    device: *const ffi::jb_device,
    config: *mut ffi::jb_kernel_config,
) -> c_int {
    // SAFETY: `user_data` points at the boxed hook its `CustomKernel` owns, alive while the
    // kernel is, and the library calls the hook only inside calls on that kernel.
    let hook = unsafe { &*(user_data as *const ConfigureHook) };
    let device = Device::from_raw(device as *mut ffi::jb_device);
    // A panic must not unwind into C.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(device))) {
        Ok(Some(chosen)) => {
            // SAFETY: the library passes a valid config to fill.
            unsafe {
                (*config).threads_per_block = chosen.threads_per_block;
                (*config).shared_memory_bytes = chosen.shared_memory_bytes;
            }
            0
        }
        _ => 1,
    }
}

impl CustomKernel {
    /// Validates the spec and generates the kernel's source; compiles nothing yet.
    ///
    /// The library checks the spec (names, dtypes, scalars, options; for a bounds-checked
    /// kernel, what the checks refuse), never what its code does: the caller vouches for that
    /// here, once, as [`SourceModule::new_declared`](crate::SourceModule::new_declared)'s caller
    /// does for a module.
    ///
    /// ```
    /// # unsafe { std::env::set_var("JITBRIDGE_DISK_CACHE", "off") };
    /// use jitbridge::{CompileOptions, CustomKernel, DType, KernelSpec};
    /// let spec = KernelSpec {
    ///     name: "negate",
    ///     inputs: &[("x", DType::F32)],
    ///     outputs: &[("y", DType::F32)],
    ///     body: "y[thread_index()] = -x[thread_index()];",
    ///     options: CompileOptions { bounds_checks: true, ..Default::default() },
    ///     ..Default::default()
    /// };
    /// // SAFETY: the body only negates, and subscripts its own arrays.
    /// let kernel = unsafe { CustomKernel::new(&spec)? };
    /// assert!(kernel.bounds_checked());
    /// # Ok::<(), jitbridge::Error>(())
    /// ```
    ///
    /// Without `unsafe` it does not compile:
    ///
    /// ```compile_fail,E0133
    /// # use jitbridge::{CustomKernel, KernelSpec};
    /// # fn f(spec: &KernelSpec<'_>) {
    /// let _ = CustomKernel::new(spec);
    /// # }
    /// ```
    ///
    /// # Safety
    ///
    /// The kernel's code (its `body`, `header`, `params`, `options.defines`, what
    /// `options.include_dirs` lets it include, compiled with `options.compiler_options`) does
    /// nothing undefined in C11 on the cpu or in CUDA C++ / HIP on a GPU, for every thread of every
    /// launch (any launch shape, any arrays and scalar values a launch accepts), apart from
    /// subscripting the kernel's own arrays and shapes (`x[i]`, `x_shape[d]`) out of range. No
    /// pointer of its own making (a cast integer, `&x[0]` plus an offset, a local array past its
    /// end), no division by zero, no signed overflow, no unbounded recursion, no `free` of what it
    /// did not allocate; and `compiler_options` keep the platform's C ABI (calling convention,
    /// reserved registers, type sizes and layout), which the library calls the code with (the
    /// options known to leave it are refused). Loading the compiled code may run it (a cpu module's
    /// constructors, at [`CustomKernel::prepare`] or the first launch on a device): the promise
    /// covers that too. Out-of-range subscripts are the library's business from then on: a
    /// bounds-checked kernel ([`CompileOptions::bounds_checks`]) catches each one as an error, so
    /// its launches are safe ([`CustomKernel::launch`]); for any other kernel the caller of
    /// [`CustomKernel::launch_unchecked`] rules them out.
    pub unsafe fn new(spec: &KernelSpec<'_>) -> Result<CustomKernel, Error> {
        let name = c_string("kernel name", spec.name)?;
        let body = c_string("body", spec.body)?;
        let header = spec.header.map(|h| c_string("header", h)).transpose()?;
        let input_names = spec
            .inputs
            .iter()
            .map(|(n, _)| c_string("input name", n))
            .collect::<Result<Vec<_>, _>>()?;
        let output_names = spec
            .outputs
            .iter()
            .map(|(n, _)| c_string("output name", n))
            .collect::<Result<Vec<_>, _>>()?;
        let scalar_names = spec
            .scalars
            .iter()
            .map(|(n, _)| c_string("scalar name", n))
            .collect::<Result<Vec<_>, _>>()?;
        let param_names = spec
            .params
            .iter()
            .map(|(n, _)| c_string("parameter name", n))
            .collect::<Result<Vec<_>, _>>()?;
        let options = spec.options.c_strings()?;
        let input_ptrs: Vec<_> = input_names.iter().map(|s| s.as_ptr()).collect();
        let output_ptrs: Vec<_> = output_names.iter().map(|s| s.as_ptr()).collect();
        let scalar_ptrs: Vec<_> = scalar_names.iter().map(|s| s.as_ptr()).collect();
        let input_dtypes: Vec<c_int> = spec.inputs.iter().map(|(_, d)| d.raw()).collect();
        let output_dtypes: Vec<c_int> = spec.outputs.iter().map(|(_, d)| d.raw()).collect();
        let scalar_dtypes: Vec<c_int> = spec.scalars.iter().map(|(_, d)| d.raw()).collect();
        let params: Vec<_> = spec
            .params
            .iter()
            .zip(&param_names)
            .map(|((_, p), name)| {
                let (kind, value) = match *p {
                    Param::Int(v) => (ffi::JB_PARAM_INT, v),
                    Param::Bool(v) => (ffi::JB_PARAM_BOOL, v as i64),
                    Param::DType(d) => (ffi::JB_PARAM_DTYPE, d.raw() as i64),
                };
                ffi::jb_kernel_param { name: name.as_ptr(), kind, value }
            })
            .collect();
        let output_inits = output_inits(spec)?;
        let hook: Option<Box<ConfigureHook>> = spec.configure.clone().map(Box::new);
        let compile_flags = spec.options.flags();
        let raw_spec = ffi::jb_kernel_spec {
            struct_size: std::mem::size_of::<ffi::jb_kernel_spec>(),
            name: name.as_ptr(),
            input_names: input_ptrs.as_ptr(),
            input_dtypes: input_dtypes.as_ptr(),
            num_inputs: input_ptrs.len(),
            output_names: output_ptrs.as_ptr(),
            output_dtypes: output_dtypes.as_ptr(),
            num_outputs: output_ptrs.len(),
            body: body.as_ptr(),
            header: header.as_ref().map_or(std::ptr::null(), |h| h.as_ptr()),
            configure: hook.as_ref().map(|_| configure_trampoline as _),
            configure_user_data: hook
                .as_ref()
                .map_or(std::ptr::null_mut(), |h| &**h as *const ConfigureHook as *mut c_void),
            scalar_names: scalar_ptrs.as_ptr(),
            scalar_dtypes: scalar_dtypes.as_ptr(),
            num_scalars: scalar_ptrs.len(),
            params: params.as_ptr(),
            num_params: params.len(),
            compile_flags,
            defines: options.define_ptrs.as_ptr(),
            num_defines: options.define_ptrs.len(),
            output_inits: output_inits.as_ref().map_or(std::ptr::null(), |v| v.as_ptr()),
            compiler_options: options.option_ptrs.as_ptr(),
            num_compiler_options: options.option_ptrs.len(),
            include_dirs: options.include_ptrs.as_ptr(),
            num_include_dirs: options.include_ptrs.len(),
            target_arch: options.target_arch(),
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: every pointer in `raw_spec` lives until this call returns; the library copies.
        check(unsafe { ffi::jb_custom_kernel_new(&mut raw, &raw_spec) })?;
        Ok(CustomKernel { raw, num_outputs: spec.outputs.len(), _hook: hook })
    }

    /// The module name: the kernel's name, '_', and 16 hex digits of the source hash.
    pub fn module_name(&self) -> String {
        // SAFETY: the name lives as long as the kernel.
        c_str(unsafe { ffi::jb_custom_kernel_module_name(self.raw) })
    }

    /// The generated source for a backend ("cpu", "cuda", "rocm"), if that backend is known.
    pub fn source(&self, backend: &str) -> Option<String> {
        let backend = CString::new(backend).ok()?;
        // SAFETY: the source lives as long as the kernel.
        let ptr = unsafe { ffi::jb_custom_kernel_source(self.raw, backend.as_ptr()) };
        (!ptr.is_null()).then(|| c_str(ptr))
    }

    /// Builds (or finds) the module on `device` and runs the configure hook, without launching:
    /// a warm-up, so that the first launch does not wait for the compiler.
    pub fn prepare(&self, device: Device) -> Result<(), Error> {
        // SAFETY: live kernel and library device.
        check(unsafe { ffi::jb_custom_kernel_prepare(self.raw, device.raw()) })
    }

    /// The kernel's [`KernelAttributes`] on `device`, its module built and loaded there first
    /// (as by [`CustomKernel::prepare`]). `Unsupported` where the GPU driver cannot say them.
    pub fn attributes(&self, device: Device) -> Result<KernelAttributes, Error> {
        let mut raw = ffi::jb_kernel_attributes::default();
        // SAFETY: live kernel and library device; the out pointer is a local.
        check(unsafe { ffi::jb_custom_kernel_attributes(self.raw, device.raw(), &mut raw) })?;
        Ok(KernelAttributes::from_raw(raw))
    }

    pub(crate) fn raw(&self) -> *mut ffi::jb_custom_kernel {
        self.raw
    }

    /// Whether the kernel is bounds-checked ([`CompileOptions::bounds_checks`], or
    /// `JITBRIDGE_BOUNDS_CHECKS=1` when it was made): then its launches are safe.
    pub fn bounds_checked(&self) -> bool {
        // SAFETY: live kernel.
        unsafe { ffi::jb_custom_kernel_bounds_checked(self.raw) != 0 }
    }
}

/// The spec's initial values as the C spec takes them: one per output, `None` when none is set.
fn output_inits(spec: &KernelSpec<'_>) -> Result<Option<Vec<ffi::jb_scalar>>, Error> {
    if spec.output_inits.is_empty() {
        return Ok(None);
    }
    let mut inits = vec![ffi::jb_scalar::none(); spec.outputs.len()];
    for (name, value) in spec.output_inits {
        let at = spec.outputs.iter().position(|(output, _)| output == name).ok_or_else(|| {
            Error::new(
                ErrorCode::InvalidArgument,
                format!("kernel '{}': an initial value names '{name}', not an output", spec.name),
            )
        })?;
        if inits[at].dtype != ffi::JB_DTYPE_INVALID {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!("kernel '{}': output '{name}' has two initial values", spec.name),
            ));
        }
        inits[at] = value.raw();
    }
    Ok(Some(inits))
}

impl Drop for CustomKernel {
    fn drop(&mut self) {
        // SAFETY: we own the kernel; built modules live on in the cache.
        unsafe { ffi::jb_custom_kernel_free(self.raw) }
    }
}

impl std::fmt::Debug for CustomKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomKernel").field("module", &self.module_name()).finish()
    }
}
