//! No safe function can corrupt memory. Two safe calls did: a launch of 1000 threads whose body
//! writes `out[thread_index()]` into a 16-element output (the heap after it, then `free(): invalid
//! pointer`), and a whole-source entry launched with an argument missing (SIGSEGV). Now the first
//! is refused unless the kernel is bounds-checked, where the 984 writes past the end go nowhere
//! and the wait reports them; the second is refused by the entry's declaration. Runs on the cpu,
//! and on GPU 0 in a GPU build.

mod common;

use jitbridge::{
    Arg, ArgDecl, Array, CompileOptions, Counters, CustomKernel, DType, Device, DeviceKind,
    ErrorCode, KernelSpec, Launch, LaunchShape, Output, Scalar, Signature, SourceModule,
    SourceModuleSpec,
};

fn writer(bounds_checks: bool) -> CustomKernel {
    common::vouched_kernel(&KernelSpec {
        name: "writes_its_thread",
        inputs: &[("inp", DType::F32)],
        outputs: &[("out", DType::F32)],
        body: "out[thread_index()] = inp[thread_index() % inp_size] + 1.0f;",
        options: CompileOptions { bounds_checks, ..Default::default() },
        ..Default::default()
    })
    .unwrap()
}

/// The thread a bounds report names: "... thread N indexed ...".
fn reported_thread(message: &str) -> u64 {
    let after =
        message.split("thread ").nth(1).unwrap_or_else(|| panic!("no thread in: {message}"));
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("no thread number in: {message}"))
}

/// The first crash, with a bounds-checked kernel: the wait fails, naming kernel, array, index
/// and thread, and the heap is intact (20 rounds, each followed by allocations that a corrupted
/// heap would trip over).
fn threads_past_the_output(device: Device) {
    let _turn = common::serial();
    let kernel = writer(true);
    assert!(kernel.bounds_checked());
    let x = Array::arange(device, 16, DType::F32).unwrap();
    for round in 0..20 {
        let out = kernel.launch(&[&x], &[&[16]], LaunchShape::Threads(1000)).unwrap();
        let err = out[0].to_vec::<f32>().unwrap_err();
        assert_eq!(err.code(), ErrorCode::Bounds, "round {round}: {err}");
        let message = err.message();
        // The cpu runs threads in order, so thread 16 is the first past the end; on a GPU the
        // first to claim the record is any of threads 16..1000, and its index is its own.
        let thread = reported_thread(message);
        let first = if device.kind() == DeviceKind::Cpu { 16..17 } else { 16..1000 };
        assert!(first.contains(&thread), "round {round}: thread {thread} in: {message}");
        let (at, named) = (format!("at {thread},"), format!("thread {thread} "));
        for part in ["writes_its_thread", "array 'out'", &at, &named, "16 elements"] {
            assert!(message.contains(part), "round {round}: no {part:?} in: {message}");
        }
        // Every later wait for it says so too; fresh arrays are sound.
        assert_eq!(out[0].eval().unwrap_err().code(), ErrorCode::Bounds);
        let fresh = Array::from_slice(device, &[7.0f32; 64], &[64]).unwrap();
        assert_eq!(fresh.to_vec::<f32>().unwrap(), [7.0; 64]);
    }
    // Within bounds the same kernel is exact and reports nothing.
    let out = kernel.launch(&[&x], &[&[16]], LaunchShape::Threads(16)).unwrap();
    let want: Vec<f32> = (0..16).map(|i| i as f32 + 1.0).collect();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), want);
}

/// A kernel that is not bounds-checked is refused by the safe launches before anything runs;
/// its unsafe launch runs it.
fn unchecked_kernels_need_unsafe(device: Device) {
    let _turn = common::serial();
    let kernel = writer(false);
    assert!(!kernel.bounds_checked());
    let x = Array::arange(device, 16, DType::F32).unwrap();
    let before = Counters::read();
    let err = kernel.launch(&[&x], &[&[16]], LaunchShape::Threads(1000)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(err.message().contains("not bounds-checked"), "{err}");
    let launch = Launch {
        inputs: &[&x],
        outputs: &mut [Output::New(&[16])],
        shape: LaunchShape::Threads(16),
        ..Default::default()
    };
    assert_eq!(kernel.launch_with(launch).unwrap_err().code(), ErrorCode::InvalidArgument);
    let after = Counters::read();
    assert_eq!((after.builds, after.misses), (before.builds, before.misses), "it was built");
    // SAFETY: 16 threads, each writes its own element of a 16-element output.
    let out = unsafe { kernel.launch_unchecked(&[&x], &[&[16]], LaunchShape::Threads(16)) };
    assert_eq!(out.unwrap()[0].to_vec::<f32>().unwrap()[15], 16.0);
}

/// The same body checked and unchecked is two kernels: the checks are part of its identity.
fn bounds_checks_are_part_of_the_identity(_device: Device) {
    assert_ne!(writer(true).module_name(), writer(false).module_name());
}

const CPU_SOURCE: &str = r#"
/* y[i] = a * x[i] for i < the smaller of the two arrays' counts, which follow the arguments */
void scale(void **args, uint64_t threads) {
    const float *x = *(const float **)args[0];
    float *y = *(float **)args[1];
    float a = *(float *)args[2];
    uint64_t n = *(uint64_t *)args[3] < *(uint64_t *)args[4] ? *(uint64_t *)args[3]
                                                              : *(uint64_t *)args[4];
    for (uint64_t i = 0; i < threads && i < n; i++)
        y[i] = a * x[i];
}
"#;

const GPU_SOURCE: &str = r#"
extern "C" __global__ void scale(const float *x, float *y, float a, unsigned long long x_n,
                                 unsigned long long y_n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < x_n && i < y_n)
        y[i] = a * x[i];
}
"#;

const SCALE_ARGS: &[ArgDecl] =
    &[ArgDecl::In(DType::F32), ArgDecl::Out(DType::F32), ArgDecl::Scalar(DType::F32)];
const SCALE: Signature<'static> = Signature::new("scale", SCALE_ARGS);

fn scale_module(declared: bool) -> SourceModule {
    let spec = SourceModuleSpec {
        name: "declared_scale",
        cpu_source: Some(CPU_SOURCE),
        gpu_source: Some(GPU_SOURCE),
        entries: &["scale"],
        ..Default::default()
    };
    if !declared {
        return SourceModule::new(&spec).unwrap();
    }
    // SAFETY: both sources' `scale` take (x, y, a) and then the two arrays' counts, and keep
    // every index below both counts whatever the thread count; only y is written.
    unsafe { SourceModule::new_declared(&spec, &[SCALE]) }.unwrap()
}

/// The second crash: an argument missing, now refused by the declaration; so are an argument
/// of the wrong role or dtype, before anything is built. A declared entry bounds itself by the
/// counts it is given, so even 4096 threads over 100 elements stay inside.
fn source_module_arguments_are_checked(device: Device) {
    let _turn = common::serial();
    let m = scale_module(true);
    let x =
        Array::from_slice(device, &(0..100).map(|i| i as f32).collect::<Vec<_>>(), &[100]).unwrap();
    let mut y = Array::zeros(device, &[100], DType::F32).unwrap();
    let before = Counters::read();
    let threads = LaunchShape::Threads(4096);
    let err = m.launch("scale", &mut [Arg::Out(&mut y), 2.0.into()], threads).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(err.message().contains("takes 3 arguments, not 2"), "{err}");
    let x_too = Array::zeros(device, &[100], DType::F32).unwrap();
    let err =
        m.launch("scale", &mut [Arg::In(&x), Arg::In(&x_too), 2.0.into()], threads).unwrap_err();
    assert!(err.message().contains("is a read array, declared a written array"), "{err}");
    let err = m
        .launch("scale", &mut [Arg::In(&x), Arg::Out(&mut y), Scalar::I32(2).into()], threads)
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Shape, "{err}");
    let after = Counters::read();
    assert_eq!((after.builds, after.misses), (before.builds, before.misses), "it was built");

    m.launch("scale", &mut [Arg::In(&x), Arg::Out(&mut y), 2.0.into()], threads).unwrap();
    let want: Vec<f32> = (0..100).map(|i| 2.0 * i as f32).collect();
    assert_eq!(y.to_vec::<f32>().unwrap(), want);

    // An undeclared entry needs the unsafe launch.
    let undeclared = scale_module(false);
    let err = undeclared.launch("scale", &mut [Arg::In(&x), Arg::Out(&mut y), 3.0.into()], threads);
    assert!(err.unwrap_err().message().contains("has no Signature"));
}

macro_rules! soundness_tests {
    ($module:ident, $device:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn threads_past_the_output() {
                super::threads_past_the_output($device);
            }

            #[test]
            fn unchecked_kernels_need_unsafe() {
                super::unchecked_kernels_need_unsafe($device);
            }

            #[test]
            fn bounds_checks_are_part_of_the_identity() {
                super::bounds_checks_are_part_of_the_identity($device);
            }

            #[test]
            fn source_module_arguments_are_checked() {
                super::source_module_arguments_are_checked($device);
            }
        }
    };
}

soundness_tests!(cpu, Device::cpu().unwrap());
#[cfg(any(feature = "cuda", feature = "rocm"))]
soundness_tests!(gpu, Device::gpu(0).unwrap());
