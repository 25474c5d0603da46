//! Launching custom kernels: safe for a bounds-checked kernel, `unsafe` for any other, whose
//! caller vouches for the launch's subscripts.

use crate::array::Array;
use crate::device::Device;
use crate::dtype::Scalar;
use crate::error::{Error, ErrorCode, check};
use crate::ffi;
use crate::kernel::{CustomKernel, LaunchShape};
use crate::stream::Stream;
use std::os::raw::c_int;

/// One output of a launch: a new array, or the caller's array written in place.
#[derive(Debug)]
pub enum Output<'a> {
    /// A new array of this shape, returned by the launch.
    New(&'a [usize]),
    /// This array, written in place (a KV-cache append, an accumulator): its dtype must be the
    /// output's, and it keeps its contents where the body does not write. The write waits for
    /// the work that made the array and for the kernels on other streams that still read it,
    /// as a source module's written argument does; the array is ready once the kernel has run.
    InPlace(&'a mut Array),
}

/// Every argument of one launch; start from `Default` and set what is needed.
///
/// ```
/// # unsafe { std::env::set_var("JITBRIDGE_DISK_CACHE", "off") };
/// use jitbridge::*;
/// let cpu = Device::cpu()?;
/// // SAFETY: the body only multiplies and adds, and subscripts its own arrays.
/// let add = unsafe {
///     CustomKernel::new(&KernelSpec {
///         name: "add_scaled",
///         inputs: &[("x", DType::F32)],
///         outputs: &[("acc", DType::F32)],
///         scalars: &[("alpha", DType::F32)],
///         body: "acc[thread_index()] += alpha * x[thread_index()];",
///         options: CompileOptions { bounds_checks: true, ..Default::default() },
///         ..Default::default()
///     })?
/// };
/// let x = Array::from_slice(cpu, &[1.0f32, 2.0, 3.0], &[3])?;
/// let mut acc = Array::zeros(cpu, &[3], DType::F32)?;
/// for _ in 0..2 {
///     add.launch_with(Launch {
///         inputs: &[&x],
///         scalars: &[0.5.into()],
///         outputs: &mut [Output::InPlace(&mut acc)],
///         shape: LaunchShape::Threads(3),
///         ..Default::default()
///     })?;
/// }
/// assert_eq!(acc.to_vec::<f32>()?, [1.0, 2.0, 3.0]);
/// # Ok::<(), jitbridge::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct Launch<'a> {
    /// The inputs, in the spec's order.
    pub inputs: &'a [&'a Array],
    /// The scalars, in the spec's order, each of its declared dtype.
    pub scalars: &'a [Scalar],
    /// One per output, in the spec's order.
    pub outputs: &'a mut [Output<'a>],
    /// How many threads run.
    pub shape: LaunchShape,
    /// The stream to launch on (of the launch's device); `None`: the calling thread's default
    /// stream there. Inputs made on other streams are waited for on it, and the outputs are
    /// ready once it passes the kernel, for any stream or thread.
    pub stream: Option<&'a Stream>,
    /// The device, for a kernel whose inputs, in-place outputs and stream do not say it (a
    /// kernel without inputs that makes new outputs).
    pub device: Option<Device>,
}

/// A launch's arguments as the C launch calls take them; `shape_ptrs` point into `_shapes`, whose
/// heap buffers stay put when this value moves.
pub(crate) struct RawLaunchArgs {
    pub(crate) inputs: Vec<*mut ffi::jb_array>,
    pub(crate) scalars: Vec<ffi::jb_scalar>,
    pub(crate) shape_ptrs: Vec<*const i64>,
    _shapes: Vec<Vec<i64>>,
    pub(crate) ndims: Vec<c_int>,
    pub(crate) in_place: Vec<*mut ffi::jb_array>,
    pub(crate) shape: ffi::jb_launch_shape,
}

impl RawLaunchArgs {
    /// The library's launch description, pointing into these arguments (which must outlive it).
    pub(crate) fn as_launch(
        &self,
        device: *mut ffi::jb_device,
        stream: *mut ffi::jb_stream,
    ) -> ffi::jb_launch {
        ffi::jb_launch {
            struct_size: std::mem::size_of::<ffi::jb_launch>(),
            device,
            stream,
            inputs: self.inputs.as_ptr(),
            num_inputs: self.inputs.len(),
            scalars: self.scalars.as_ptr(),
            num_scalars: self.scalars.len(),
            output_shapes: self.shape_ptrs.as_ptr(),
            output_ndims: self.ndims.as_ptr(),
            in_place: self.in_place.as_ptr(),
            shape: self.shape,
        }
    }
}

impl CustomKernel {
    /// Launches on the inputs' device and the calling thread's default stream there, building
    /// the module on first use, and returns one new array per output, of the given shapes.
    /// Safe: the kernel must be bounds-checked ([`crate::CompileOptions::bounds_checks`]), which
    /// catches every out-of-range subscript, and its maker vouched for the rest
    /// ([`CustomKernel::new`]). A kernel that is not bounds-checked is an `InvalidArgument`
    /// error here and nothing runs: launch it with [`CustomKernel::launch_unchecked`].
    pub fn launch(
        &self,
        inputs: &[&Array],
        output_shapes: &[&[usize]],
        shape: LaunchShape,
    ) -> Result<Vec<Array>, Error> {
        self.refuse_unchecked()?;
        // SAFETY: the kernel is bounds-checked: no subscript of its arrays is out of range.
        unsafe { self.launch_unchecked(inputs, output_shapes, shape) }
    }

    /// [`CustomKernel::launch`] with every argument of [`Launch`]: scalars, in-place outputs, a
    /// stream, a device. Returns the new outputs, in order. Safe for a bounds-checked kernel;
    /// an `InvalidArgument` error for any other.
    pub fn launch_with(&self, launch: Launch<'_>) -> Result<Vec<Array>, Error> {
        self.refuse_unchecked()?;
        // SAFETY: the kernel is bounds-checked: no subscript of its arrays is out of range.
        unsafe { self.launch_with_unchecked(launch) }
    }

    /// [`CustomKernel::launch`] for any kernel, bounds-checked or not.
    ///
    /// # Safety
    ///
    /// Run once for every thread of `shape` on these arrays (with their contents when it runs),
    /// the body and header subscript the kernel's arrays only in range: each `x[i]` with
    /// `0 <= i < x_size`, each `x_shape[d]` with `d < x_ndim`. Everything else the code does
    /// was promised when the kernel was made ([`CustomKernel::new`]). The library checks every
    /// argument (counts, dtypes, shapes, devices) but not the body's subscripts: on the cpu one
    /// out of range corrupts this process's memory. A bounds-checked kernel needs no promise:
    /// launch it with the safe [`CustomKernel::launch`].
    pub unsafe fn launch_unchecked(
        &self,
        inputs: &[&Array],
        output_shapes: &[&[usize]],
        shape: LaunchShape,
    ) -> Result<Vec<Array>, Error> {
        let mut outputs: Vec<Output<'_>> = output_shapes.iter().map(|s| Output::New(s)).collect();
        let launch = Launch { inputs, outputs: &mut outputs, shape, ..Default::default() };
        // SAFETY: the caller's promise covers this launch.
        unsafe { self.launch_with_unchecked(launch) }
    }

    /// [`CustomKernel::launch_with`] for any kernel, bounds-checked or not.
    ///
    /// # Safety
    ///
    /// As for [`CustomKernel::launch_unchecked`], for the launch `launch` describes (its
    /// scalars and in-place outputs included).
    pub unsafe fn launch_with_unchecked(&self, launch: Launch<'_>) -> Result<Vec<Array>, Error> {
        let mut shapes = Vec::with_capacity(launch.outputs.len());
        let mut in_place = Vec::with_capacity(launch.outputs.len());
        for output in launch.outputs.iter() {
            match output {
                Output::New(shape) => {
                    shapes.push(*shape);
                    in_place.push(std::ptr::null_mut());
                }
                Output::InPlace(array) => {
                    shapes.push(&[]);
                    in_place.push(array.raw());
                }
            }
        }
        let mut args =
            self.raw_launch_args(launch.inputs, launch.scalars, &shapes, launch.shape)?;
        args.in_place = in_place;
        let raw = args.as_launch(
            launch.device.map_or(std::ptr::null_mut(), |d| d.raw()),
            launch.stream.map_or(std::ptr::null_mut(), |s| s.raw()),
        );
        let mut outputs = vec![std::ptr::null_mut(); self.num_outputs];
        // SAFETY: every pointer is valid for the call; the library writes `num_outputs` arrays
        // (NULL for in-place ones); arrays written in place are borrowed mutably, so no other
        // thread uses them meanwhile. The body's subscripts are the caller's promise, the rest
        // of its code the kernel maker's.
        check(unsafe { ffi::jb_custom_kernel_run(outputs.as_mut_ptr(), self.raw(), &raw) })?;
        Ok(outputs.into_iter().filter(|a| !a.is_null()).map(Array::from_raw).collect())
    }

    fn refuse_unchecked(&self) -> Result<(), Error> {
        if self.bounds_checked() {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::InvalidArgument,
            format!(
                "kernel '{}' is not bounds-checked, so a safe launch cannot vouch for its body: \
                 make it with CompileOptions {{ bounds_checks: true, .. }} (or run with \
                 JITBRIDGE_BOUNDS_CHECKS=1), or launch it with the unsafe launch_unchecked",
                self.module_name()
            ),
        ))
    }

    /// A launch's arguments in the C calls' form (the count of output shapes checked), shared by
    /// launches and the bench's raw launcher.
    pub(crate) fn raw_launch_args(
        &self,
        inputs: &[&Array],
        scalars: &[Scalar],
        output_shapes: &[&[usize]],
        shape: LaunchShape,
    ) -> Result<RawLaunchArgs, Error> {
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
        let c_shapes = output_shapes
            .iter()
            .map(|s| crate::array::c_shape(s))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RawLaunchArgs {
            inputs: inputs.iter().map(|a| a.raw()).collect(),
            scalars: scalars.iter().map(Scalar::raw).collect(),
            shape_ptrs: c_shapes.iter().map(|s| s.as_ptr()).collect(),
            _shapes: c_shapes,
            ndims: output_shapes.iter().map(|s| s.len() as c_int).collect(),
            in_place: Vec::new(),
            shape: shape.raw(),
        })
    }
}
