//! The entry points of `jitbridge_sys.h` (the C library's header for tools, tests and
//! benchmarks) in safe form, for the `jitbridge` command and this crate's tests: the probe's
//! body, the lock-removal status, the benchmarks' baselines and the raw decode control. Not for
//! production paths, and not on the API page.

use crate::array::Array;
use crate::device::Device;
use crate::dtype::Scalar;
use crate::error::{Error, check};
use crate::ffi;
use crate::kernel::{CustomKernel, LaunchShape};

/// The locks a test-only build removed (bits: 1 jit cache, 2 event pool, 4 configure); 0 for
/// every normal build.
pub fn removed_locks() -> i32 {
    // SAFETY: no arguments.
    unsafe { ffi::jb_removed_locks() }
}

/// The race probe's kernel body, as the library writes it: for tools and tests that build the
/// probe's kernel themselves.
pub fn probe_body() -> &'static str {
    // SAFETY: a static NUL-terminated string, valid for the process.
    let body = unsafe { std::ffi::CStr::from_ptr(ffi::jb_race_probe_body()) };
    body.to_str().expect("the probe body is ASCII")
}

/// Nanoseconds per bare backend launch of the probe plus an event record, into one
/// preallocated output on the thread's default stream.
pub fn raw_probe_launches(input: &Array, variant: i32, launches: i32) -> Result<f64, Error> {
    let mut ns = 0.0;
    // SAFETY: valid out pointer and live input.
    check(unsafe { ffi::jb_bench_raw_probe_launches(&mut ns, input.raw(), variant, launches) })?;
    Ok(ns)
}

/// Switches the counting of `device`'s driver calls on or off for the whole process (off: the
/// driver is called directly, at no cost). `Unsupported` for the cpu and for ROCm.
///
/// # Safety
///
/// The switch rewrites the backend's table of driver entry points in place: no other thread
/// may use `device`'s backend (launch, allocate, build, synchronize) while it runs.
pub unsafe fn count_driver_calls(device: Device, enabled: bool) -> Result<(), Error> {
    // SAFETY: a library device; the caller keeps every other thread off the backend.
    check(unsafe { ffi::jb_driver_call_counting(device.raw(), i32::from(enabled)) })
}

/// The driver calls the calling thread made into `device`'s driver while counting was on, since
/// the last call of this (which starts its counts again): (name, count), in a fixed order.
pub fn take_thread_driver_calls(device: Device) -> Result<Vec<(String, u64)>, Error> {
    let mut room = 0;
    // SAFETY: no room given, so only the count is written; nothing is reset.
    check(unsafe {
        ffi::jb_thread_driver_calls(device.raw(), std::ptr::null_mut(), 0, &mut room, 0)
    })?;
    let mut calls: Vec<ffi::jb_driver_call_count> = Vec::with_capacity(room);
    let mut made = 0;
    // SAFETY: room for `room` entries; the thread made no call in between, so all fit.
    check(unsafe {
        ffi::jb_thread_driver_calls(device.raw(), calls.as_mut_ptr(), room, &mut made, 1)
    })?;
    // SAFETY: the library wrote min(made, room) entries.
    unsafe { calls.set_len(made.min(room)) };
    Ok(calls
        .iter()
        .map(|call| {
            // SAFETY: a static NUL-terminated name of the library.
            let name = unsafe { std::ffi::CStr::from_ptr(call.name) };
            (name.to_string_lossy().into_owned(), call.count)
        })
        .collect())
}

/// Nanoseconds the backend's compiler alone takes for the kernel's source on `device`.
pub fn compile_only(kernel: &CustomKernel, device: Device) -> Result<f64, Error> {
    let mut ns = 0.0;
    // SAFETY: valid out pointer, live kernel, library device.
    check(unsafe { ffi::jb_bench_compile_only(&mut ns, kernel.raw(), device.raw()) })?;
    Ok(ns)
}

/// What one compile cost with a set of options, and what it made (`compile_with`).
pub type CompileCost = ffi::jb_bench_compile_cost;

/// The compiler options a [`compile_with`] runs.
#[derive(Clone, Copy, Debug)]
pub enum CompileOptions<'a> {
    /// The library's own, as a build runs them; a GPU's for this architecture ("sm_90"), or the
    /// `load_on` device's when None.
    Own { arch: Option<&'a str> },
    /// In place of the library's own: a GPU compiler gets exactly these (they name the
    /// architecture); the cpu compiler these in place of its fixed flags (`-O2`, `-fPIC`,
    /// `-shared`, ...), then the kernel's options and its files.
    These(&'a [&'a str]),
}

/// Compiles the kernel's own generated source for `backend` ("cpu", "cuda", "rocm": built in,
/// no device of it needed), nothing cached, with `options`; with `load_on`, the code is also
/// loaded there (for PTX: the driver's JIT) and its kernel found, both timed, and unloaded. A
/// cpu .so names its temporary source file, so its checksum differs between any two compiles.
pub fn compile_with(
    kernel: &CustomKernel,
    backend: &str,
    options: CompileOptions<'_>,
    load_on: Option<Device>,
) -> Result<CompileCost, Error> {
    let text = |s: &str| {
        std::ffi::CString::new(s).map_err(|_| {
            Error::new(crate::ErrorCode::InvalidArgument, format!("{s:?} holds a NUL byte"))
        })
    };
    let backend = text(backend)?;
    let (arch, owned) = match options {
        CompileOptions::Own { arch } => (arch.map(text).transpose()?, None),
        CompileOptions::These(list) => {
            (None, Some(list.iter().map(|o| text(o)).collect::<Result<Vec<_>, _>>()?))
        }
    };
    let pointers: Option<Vec<*const std::os::raw::c_char>> =
        owned.as_ref().map(|list| list.iter().map(|o| o.as_ptr()).collect());
    let mut cost = CompileCost::default();
    // SAFETY: every pointer is valid for the call (the strings outlive it); a NULL list with
    // count 0 asks for the library's own options.
    check(unsafe {
        ffi::jb_bench_compile_with(
            &mut cost,
            kernel.raw(),
            backend.as_ptr(),
            arch.as_ref().map_or(std::ptr::null(), |a| a.as_ptr()),
            pointers.as_ref().map_or(std::ptr::null(), |p| p.as_ptr()),
            pointers.as_ref().map_or(0, Vec::len),
            load_on.map_or(std::ptr::null_mut(), |d| d.raw()),
        )
    })?;
    Ok(cost)
}

/// Where one cold first launch of the probe spent its time, in nanoseconds.
pub type ColdSteps = ffi::jb_bench_cold_steps;

/// One first launch of the probe `variant` (not built yet), timed step by step.
pub fn cold_probe_steps(input: &Array, variant: i32) -> Result<ColdSteps, Error> {
    let mut steps = ColdSteps::default();
    // SAFETY: valid out pointer of the C layout, live input.
    check(unsafe { ffi::jb_bench_cold_probe_steps(&mut steps, input.raw(), variant) })?;
    Ok(steps)
}

/// The raw decode control of `jitbridge soak --decode raw`: a kernel's launch staged once by the
/// library, then per step only the backend's launch, an event record and a wait for the event,
/// into the same fixed outputs (no lookup, array, hold or allocation). Used on the thread that
/// made it, while that thread's default stream stays installed; not `Send` (a raw pointer).
pub struct RawLauncher<'a> {
    raw: *mut ffi::jb_bench_raw_launcher,
    /// The C launcher reads the kernel and the inputs' buffers at every step.
    _uses: std::marker::PhantomData<(&'a CustomKernel, &'a Array)>,
}

impl<'a> RawLauncher<'a> {
    /// Stages the launch (as `launch_with_unchecked` on the thread's default stream) and runs
    /// it once, waiting for it. The launcher holds its own reference on that stream and on the
    /// inputs' buffers, so dropping the guard that installed the stream, or the stream, is safe.
    ///
    /// # Safety
    ///
    /// As for [`CustomKernel::launch_unchecked`], for this launch and for every step's scalars.
    pub unsafe fn new(
        kernel: &'a CustomKernel,
        inputs: &[&'a Array],
        scalars: &[Scalar],
        output_shapes: &[&[usize]],
        shape: LaunchShape,
    ) -> Result<RawLauncher<'a>, Error> {
        let args = kernel.raw_launch_args(inputs, scalars, output_shapes, shape)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call; one shape per output (checked above).
        check(unsafe {
            ffi::jb_bench_raw_launcher_new(
                &mut raw,
                kernel.raw(),
                args.inputs.as_ptr(),
                args.inputs.len(),
                args.scalars.as_ptr(),
                args.scalars.len(),
                args.shape_ptrs.as_ptr(),
                args.ndims.as_ptr(),
                &args.shape,
            )
        })?;
        Ok(RawLauncher { raw, _uses: std::marker::PhantomData })
    }

    /// One step with these scalars: (nanoseconds of launch + event record, of the wait).
    ///
    /// # Safety
    ///
    /// As for [`CustomKernel::launch_unchecked`], with these scalars.
    pub unsafe fn step(&mut self, scalars: &[Scalar]) -> (Result<(), Error>, u64, u64) {
        let raw_scalars: Vec<_> = scalars.iter().map(Scalar::raw).collect();
        let (mut launch_ns, mut wait_ns) = (0, 0);
        // SAFETY: live launcher, used on its thread (not Send); valid scalars and out pointers.
        let status = unsafe {
            ffi::jb_bench_raw_launcher_step(
                self.raw,
                raw_scalars.as_ptr(),
                raw_scalars.len(),
                &mut launch_ns,
                &mut wait_ns,
            )
        };
        (check(status), launch_ns, wait_ns)
    }

    /// Copies f32 output `output` into `dst` (its exact element count).
    pub fn read_f32(&self, output: usize, dst: &mut [f32]) -> Result<(), Error> {
        // SAFETY: live launcher; `dst` has room for `size_of_val(dst)` bytes, any bits valid f32.
        check(unsafe {
            ffi::jb_bench_raw_launcher_read(
                self.raw,
                output,
                dst.as_mut_ptr().cast(),
                std::mem::size_of_val(dst),
            )
        })
    }
}

impl Drop for RawLauncher<'_> {
    fn drop(&mut self) {
        // SAFETY: made by jb_bench_raw_launcher_new, freed once.
        unsafe { ffi::jb_bench_raw_launcher_free(self.raw) }
    }
}
