//! Custom kernels: a body the library wraps into a whole kernel for the device's backend.

use crate::array::{Array, DType};
use crate::device::Device;
use crate::error::{Error, ErrorCode, c_str, check};
use crate::ffi;
use std::ffi::CString;
use std::os::raw::{c_int, c_void};

/// What a configure hook decides for a kernel on one device before its first launch there.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KernelConfig {
    /// Threads per block for launches given as a thread count (0 keeps the default, 256).
    pub threads_per_block: u32,
    /// Dynamic shared memory per block, in bytes (GPU only).
    pub shared_memory_bytes: u32,
}

/// A one-time configure hook: runs once per kernel per device, before the first launch there,
/// under that kernel's configure lock. `None` fails the launch (the next launch tries again).
pub type ConfigureHook = fn(Device) -> Option<KernelConfig>;

/// Describes a custom kernel. In the body, `thread_index()` is the thread's global index, each
/// input `x` is a const pointer of its dtype with `x_size` elements, and each output `y` a
/// writable pointer with `y_size`.
#[derive(Debug, Clone, Copy)]
pub struct KernelSpec<'a> {
    /// The kernel's name: a C identifier.
    pub name: &'a str,
    /// Input names (C identifiers) and dtypes.
    pub inputs: &'a [(&'a str, DType)],
    /// Output names (C identifiers) and dtypes.
    pub outputs: &'a [(&'a str, DType)],
    /// Statements every thread runs.
    pub body: &'a str,
    /// Source pasted before the kernel (helper functions), if any.
    pub header: Option<&'a str>,
    /// A one-time configure hook, if any.
    pub configure: Option<ConfigureHook>,
}

/// How many threads a launch runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchShape {
    /// This many threads in blocks of the configured size (256 unless a hook says otherwise).
    Threads(u64),
    /// An explicit grid of blocks and block of threads.
    Grid {
        /// Blocks in x, y, z.
        grid: [u32; 3],
        /// Threads per block in x, y, z.
        block: [u32; 3],
    },
}

/// A compiled-on-first-use kernel. Its module is named after the kernel plus a hash of the
/// generated source, so two bodies under one name never share a module.
///
/// ```
/// # // Doc tests keep off the user's disk cache; nothing else runs yet.
/// # unsafe { std::env::set_var("JITBRIDGE_DISK_CACHE", "off") };
/// use jitbridge::{Array, CustomKernel, DType, Device, KernelSpec, LaunchShape};
/// let kernel = CustomKernel::new(&KernelSpec {
///     name: "add_one",
///     inputs: &[("x", DType::F32)],
///     outputs: &[("y", DType::F32)],
///     body: "y[thread_index()] = x[thread_index()] + 1.0f;",
///     header: None,
///     configure: None,
/// })?;
/// let x = Array::from_slice(Device::cpu()?, &[1.0f32, 2.0, 3.0], &[3])?;
/// let y = kernel.launch(&[&x], &[&[3]], LaunchShape::Threads(3))?;
/// assert_eq!(y[0].to_vec::<f32>()?, [2.0, 3.0, 4.0]);
/// # Ok::<(), jitbridge::Error>(())
/// ```
pub struct CustomKernel {
    raw: *mut ffi::jb_custom_kernel,
    num_outputs: usize,
}

// SAFETY: a C custom kernel is immutable once created, and launching it from several threads
// at once is allowed (jitbridge.h); the handle only owns it.
unsafe impl Send for CustomKernel {}
// SAFETY: as above.
unsafe impl Sync for CustomKernel {}

fn c_string(what: &str, s: &str) -> Result<CString, Error> {
    CString::new(s).map_err(|_| {
        Error::new(ErrorCode::InvalidArgument, format!("the {what} contains a NUL byte"))
    })
}

unsafe extern "C" fn configure_trampoline(
    user_data: *mut c_void,
    device: *const ffi::jb_device,
    config: *mut ffi::jb_kernel_config,
) -> c_int {
    // SAFETY: `user_data` was made from a `ConfigureHook` in `CustomKernel::new`.
    let hook: ConfigureHook =
        unsafe { std::mem::transmute::<*mut c_void, ConfigureHook>(user_data) };
    let device = Device::from_raw(device as *mut ffi::jb_device);
    // A panic must not unwind into C.
    match std::panic::catch_unwind(|| hook(device)) {
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
    pub fn new(spec: &KernelSpec<'_>) -> Result<CustomKernel, Error> {
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
        let input_ptrs: Vec<_> = input_names.iter().map(|s| s.as_ptr()).collect();
        let output_ptrs: Vec<_> = output_names.iter().map(|s| s.as_ptr()).collect();
        let input_dtypes: Vec<c_int> = spec.inputs.iter().map(|(_, d)| d.raw()).collect();
        let output_dtypes: Vec<c_int> = spec.outputs.iter().map(|(_, d)| d.raw()).collect();
        let raw_spec = ffi::jb_kernel_spec {
            name: name.as_ptr(),
            input_names: input_ptrs.as_ptr(),
            input_dtypes: input_dtypes.as_ptr(),
            num_inputs: input_ptrs.len(),
            output_names: output_ptrs.as_ptr(),
            output_dtypes: output_dtypes.as_ptr(),
            num_outputs: output_ptrs.len(),
            body: body.as_ptr(),
            header: header.as_ref().map_or(std::ptr::null(), |h| h.as_ptr()),
            configure: spec.configure.map(|_| configure_trampoline as _),
            configure_user_data: spec.configure.map_or(std::ptr::null_mut(), |f| f as *mut c_void),
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: every pointer in `raw_spec` lives until this call returns; the library copies.
        check(unsafe { ffi::jb_custom_kernel_new(&mut raw, &raw_spec) })?;
        Ok(CustomKernel { raw, num_outputs: spec.outputs.len() })
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

    pub(crate) fn raw(&self) -> *mut ffi::jb_custom_kernel {
        self.raw
    }

    /// Launches on the inputs' device and the calling thread's default stream there, building
    /// the module on first use. Returns one new array per output, of the given shapes.
    pub fn launch(
        &self,
        inputs: &[&Array],
        output_shapes: &[&[i64]],
        shape: LaunchShape,
    ) -> Result<Vec<Array>, Error> {
        if output_shapes.len() != self.num_outputs {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!(
                    "the kernel has {} outputs, {} shapes were given",
                    self.num_outputs,
                    output_shapes.len()
                ),
            ));
        }
        let raw_inputs: Vec<_> = inputs.iter().map(|a| a.raw()).collect();
        let shape_ptrs: Vec<_> = output_shapes.iter().map(|s| s.as_ptr()).collect();
        let ndims: Vec<c_int> = output_shapes.iter().map(|s| s.len() as c_int).collect();
        let raw_shape = match shape {
            LaunchShape::Threads(n) => {
                ffi::jb_launch_shape { total_threads: n, ..Default::default() }
            }
            LaunchShape::Grid { grid, block } => {
                ffi::jb_launch_shape { grid, block, total_threads: 0 }
            }
        };
        let mut outputs = vec![std::ptr::null_mut(); self.num_outputs];
        // SAFETY: every pointer is valid for the call; the library writes `num_outputs` arrays.
        check(unsafe {
            ffi::jb_custom_kernel_launch(
                outputs.as_mut_ptr(),
                self.raw,
                raw_inputs.as_ptr(),
                raw_inputs.len(),
                shape_ptrs.as_ptr(),
                ndims.as_ptr(),
                &raw_shape,
            )
        })?;
        Ok(outputs.into_iter().map(Array::from_raw).collect())
    }
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
