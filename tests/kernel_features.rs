//! What a model's kernels need beyond a body: scalar arguments by value, compile-time parameters
//! (each value its own module), compile options in the key, launches on an explicit stream
//! ordered against the default stream, and configure hooks that capture state. Runs on the cpu,
//! and on GPU 0 in a GPU build.

mod common;

use jitbridge::{
    Array, Bf16, CompileOptions, Counters, CustomKernel, DType, Device, ErrorCode, F16,
    KernelConfig, KernelSpec, Launch, LaunchShape, Output, Param, Scalar, Stream, streams,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One launch of a kernel of this file, each of whose bodies touches only element
/// thread_index() of arrays as long as the launch's thread count.
fn run(
    kernel: &CustomKernel,
    inputs: &[&Array],
    scalars: &[Scalar],
    shape: &[usize],
    threads: LaunchShape,
    stream: Option<&Stream>,
) -> Result<Vec<Array>, jitbridge::Error> {
    let launch = Launch {
        inputs,
        scalars,
        outputs: &mut [Output::New(shape)],
        shape: threads,
        stream,
        ..Default::default()
    };
    // SAFETY: every body here reads and writes element thread_index() only, of arrays with as
    // many elements as the launch has threads (the callers pass such shapes).
    unsafe { kernel.launch_with_unchecked(launch) }
}

fn launch1(kernel: &CustomKernel, x: &Array, scalars: &[Scalar], n: usize) -> Array {
    run(kernel, &[x], scalars, &[n], LaunchShape::Threads(n), None).unwrap().remove(0)
}

/// Each dtype's scalar reaches the kernel by value, bit for bit, and several scalars of mixed
/// sizes land in their own places.
fn scalars_pass_by_value(device: Device) {
    let _turn = common::serial();
    let x = Array::from_slice(device, &[0.0f32; 4], &[4]).unwrap();
    let cases = [
        Scalar::F32(-1.25e-30),
        Scalar::I32(-123_456_789),
        Scalar::F16(F16::from_bits(0x8001)),
        Scalar::Bf16(Bf16::from_bits(0x7f7f)),
        Scalar::F64(1e300),
        Scalar::I8(-128),
        Scalar::U8(255),
        Scalar::U32(0xdead_beef),
        Scalar::I64(i64::MIN + 7),
        Scalar::Bool(true),
        Scalar::I16(i16::MIN + 5),
        Scalar::U16(0xbeef),
        Scalar::U64(0xfedc_ba98_7654_3210),
    ];
    for scalar in cases {
        let dtype = scalar.dtype();
        let kernel = common::vouched_kernel(&KernelSpec {
            name: "scalar_copy",
            inputs: &[("x", DType::F32)],
            outputs: &[("y", dtype)],
            scalars: &[("s", dtype)],
            body: "(void)x; y[thread_index()] = s;",
            ..Default::default()
        })
        .unwrap();
        let y = launch1(&kernel, &x, &[scalar], 4);
        let read = match scalar {
            Scalar::F32(_) => Scalar::F32(y.to_vec::<f32>().unwrap()[3]),
            Scalar::I32(_) => Scalar::I32(y.to_vec::<i32>().unwrap()[3]),
            Scalar::F16(_) => Scalar::F16(y.to_vec::<F16>().unwrap()[3]),
            Scalar::Bf16(_) => Scalar::Bf16(y.to_vec::<Bf16>().unwrap()[3]),
            Scalar::F64(_) => Scalar::F64(y.to_vec::<f64>().unwrap()[3]),
            Scalar::I8(_) => Scalar::I8(y.to_vec::<i8>().unwrap()[3]),
            Scalar::U8(_) => Scalar::U8(y.to_vec::<u8>().unwrap()[3]),
            Scalar::U32(_) => Scalar::U32(y.to_vec::<u32>().unwrap()[3]),
            Scalar::I64(_) => Scalar::I64(y.to_vec::<i64>().unwrap()[3]),
            Scalar::Bool(_) => Scalar::Bool(y.to_vec::<bool>().unwrap()[3]),
            Scalar::I16(_) => Scalar::I16(y.to_vec::<i16>().unwrap()[3]),
            Scalar::U16(_) => Scalar::U16(y.to_vec::<u16>().unwrap()[3]),
            Scalar::U64(_) => Scalar::U64(y.to_vec::<u64>().unwrap()[3]),
        };
        assert_eq!(read, scalar, "a {dtype:?} scalar did not arrive intact");
    }

    let mixed = common::vouched_kernel(&KernelSpec {
        name: "scalar_mix",
        inputs: &[("x", DType::F64)],
        outputs: &[("y", DType::F64)],
        scalars: &[
            ("a", DType::I8),
            ("b", DType::F64),
            ("c", DType::Bf16),
            ("d", DType::I64),
            ("e", DType::Bool),
            ("f", DType::F16),
        ],
        body: "const uint64_t i = thread_index();\n\
               y[i] = x[i] + a + b + bf16_to_f32(c) + (f64)d + (e ? 1000.0 : 0.0) + f16_to_f32(f);",
        ..Default::default()
    })
    .unwrap();
    let xs: Vec<f64> = (0..100).map(|i| i as f64).collect();
    let x = Array::from_slice(device, &xs, &[100]).unwrap();
    let scalars = [
        Scalar::I8(-3),
        Scalar::F64(0.5),
        Scalar::Bf16(Bf16::from_f32(2.0)),
        Scalar::I64(1 << 40),
        Scalar::Bool(true),
        Scalar::F16(F16::from_f32(0.25)),
    ];
    let y = launch1(&mixed, &x, &scalars, 100).to_vec::<f64>().unwrap();
    for (i, v) in y.iter().enumerate() {
        assert_eq!(*v, i as f64 - 3.0 + 0.5 + 2.0 + (1u64 << 40) as f64 + 1000.0 + 0.25);
    }

    // The 16- and 64-bit integer scalars are their C types in a body: i16 sign-extends, u16
    // does not, and u64 arithmetic wraps modulo 2^64 above i64's range.
    let widths = common::vouched_kernel(&KernelSpec {
        name: "scalar_widths",
        inputs: &[("x", DType::U64)],
        outputs: &[("y", DType::U64)],
        scalars: &[("a", DType::I16), ("b", DType::U16), ("c", DType::U64)],
        body: "const uint64_t i = thread_index();\n\
               y[i] = x[i] * c + (u64)(i64)a + (u64)b + (u64)sizeof(a) * 100 + sizeof(c);",
        ..Default::default()
    })
    .unwrap();
    let xs: Vec<u64> = (0..64).map(|i| i * 0x0123_4567_89ab_cdef).collect();
    let wide_x = Array::from_slice(device, &xs, &[64]).unwrap();
    let (a, b, c) = (-2i16, 0xfff0u16, u64::MAX - 2);
    let widths_scalars = [Scalar::I16(a), Scalar::U16(b), Scalar::U64(c)];
    let y = launch1(&widths, &wide_x, &widths_scalars, 64).to_vec::<u64>().unwrap();
    for (x, y) in xs.iter().zip(&y) {
        let want = x.wrapping_mul(c).wrapping_add(a as i64 as u64).wrapping_add(b as u64) + 208;
        assert_eq!(*y, want, "x = {x:#x}");
    }

    // Bad scalars are refused before anything is built.
    let before = Counters::read();
    let bad: [&[Scalar]; 4] = [
        &scalars[..5],
        &[Scalar::I32(-3), scalars[1], scalars[2], scalars[3], scalars[4], scalars[5]],
        &[scalars[0], scalars[1], scalars[2], scalars[3], scalars[4], scalars[5], scalars[5]],
        &[],
    ];
    for (i, s) in bad.iter().enumerate() {
        let err = run(&mixed, &[&x], s, &[100], LaunchShape::Threads(100), None).unwrap_err();
        assert!(
            matches!(err.code(), ErrorCode::InvalidArgument | ErrorCode::Shape),
            "bad scalars {i}: {err}"
        );
    }
    let err = run(&mixed, &[&x], &[], &[100], LaunchShape::Threads(100), None).unwrap_err();
    assert!(err.message().contains("scalars"), "{err}");
    let after = Counters::read();
    assert_eq!((after.builds, after.misses), (before.builds, before.misses));
}

fn scaled(device: Device, n_value: i64, dtype: DType) -> (String, Vec<f32>) {
    let kernel = common::vouched_kernel(&KernelSpec {
        name: "param_scale",
        inputs: &[("x", DType::F32)],
        outputs: &[("y", DType::F32)],
        params: &[
            ("N", Param::Int(n_value)),
            ("T", Param::DType(dtype)),
            ("NEG", Param::Bool(true)),
        ],
        // T is a type, N an integer constant usable where C needs one, NEG a 0/1 constant.
        body: "T local[N > 0 ? N : 1]; (void)local;\n\
               y[thread_index()] = (NEG ? -1.0f : 1.0f) * x[thread_index()] * (float)N \
               + (float)sizeof(T);",
        ..Default::default()
    })
    .unwrap();
    let x = Array::arange(device, 10, DType::F32).unwrap();
    let y = run(&kernel, &[&x], &[], &[10], LaunchShape::Threads(10), None).unwrap();
    (kernel.module_name(), y[0].to_vec::<f32>().unwrap())
}

/// N = 64 and N = 128 (and two dtypes) are distinct modules under one name, each right.
fn parameters_make_distinct_modules(device: Device) {
    let _turn = common::serial();
    Counters::reset();
    let (m64, y64) = scaled(device, 64, DType::F32);
    let (m128, y128) = scaled(device, 128, DType::F32);
    let (m128h, y128h) = scaled(device, 128, DType::Bf16);
    let (again, _) = scaled(device, 64, DType::F32);
    assert_ne!(m64, m128);
    assert_ne!(m128, m128h);
    assert_eq!(m64, again, "the same parameters are the same module");
    let c = Counters::read();
    assert_eq!(c.builds + c.disk_hits, 3, "three parameter sets, three modules");
    for i in 0..10 {
        assert_eq!(y64[i], -(i as f32) * 64.0 + 4.0);
        assert_eq!(y128[i], -(i as f32) * 128.0 + 4.0);
        assert_eq!(y128h[i], -(i as f32) * 128.0 + 2.0);
    }
    // Bad parameters: a name taken by an input, a reserved word.
    for params in [&[("x", Param::Int(1))][..], &[("float", Param::Int(1))]] {
        let err = common::vouched_kernel(&KernelSpec {
            name: "param_bad",
            inputs: &[("x", DType::F32)],
            outputs: &[("y", DType::F32)],
            params,
            body: "",
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    }
}

fn with_options(options: CompileOptions<'_>) -> Result<CustomKernel, jitbridge::Error> {
    common::vouched_kernel(&KernelSpec {
        name: "optioned",
        inputs: &[("x", DType::F32)],
        outputs: &[("y", DType::F32)],
        body: "#ifdef OFFSET\ny[thread_index()] = x[thread_index()] + OFFSET;\n#else\n\
               y[thread_index()] = x[thread_index()];\n#endif",
        options,
        ..Default::default()
    })
}

/// Each compile option changes the module name (so the cache and disk keys), and defines reach
/// the source.
fn options_change_the_key(device: Device) {
    let _turn = common::serial();
    let plain = with_options(CompileOptions::default()).unwrap();
    let fast = with_options(CompileOptions { fast_math: true, ..Default::default() }).unwrap();
    let lines = with_options(CompileOptions { line_info: true, ..Default::default() }).unwrap();
    let defined =
        with_options(CompileOptions { defines: &["OFFSET=2.5f"], ..Default::default() }).unwrap();
    // An option the device's compiler takes, and its own architecture named as a target.
    let cpu = device.kind() == jitbridge::DeviceKind::Cpu;
    let option = if cpu { "-funsigned-char" } else { "--ftz=true" };
    let optioned =
        with_options(CompileOptions { compiler_options: &[option], ..Default::default() }).unwrap();
    let arch = if cpu { "native".to_string() } else { device.arch() };
    let targeted =
        with_options(CompileOptions { target_arch: Some(&arch), ..Default::default() }).unwrap();
    let names = [&plain, &fast, &lines, &defined, &optioned, &targeted].map(|k| k.module_name());
    for i in 0..names.len() {
        for j in 0..i {
            assert_ne!(names[i], names[j], "two option sets share a module");
        }
    }
    let x = Array::arange(device, 8, DType::F32).unwrap();
    let all = [(&plain, 0.0), (&fast, 0.0), (&lines, 0.0), (&defined, 2.5), (&optioned, 0.0)];
    for (kernel, offset) in all.into_iter().chain([(&targeted, 0.0)]) {
        let y = run(kernel, &[&x], &[], &[8], LaunchShape::Threads(8), None).unwrap();
        let want: Vec<f32> = (0..8).map(|i| i as f32 + offset).collect();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), want);
    }
    for bad in ["1X=2", "A=line\nbreak", "jb_secret", ""] {
        let defines = [bad];
        let err =
            with_options(CompileOptions { defines: &defines, ..Default::default() }).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "define {bad:?}: {err}");
    }
    for bad in ["-o/tmp/x", "-Bprefix", "-DX=1", "-Irelative", "no-dash"] {
        let options = [bad];
        let err = with_options(CompileOptions { compiler_options: &options, ..Default::default() })
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "compiler option {bad:?}: {err}");
    }
    for bad in ["relative/include", "/definitely/not/a/folder"] {
        let dirs = [bad];
        let err =
            with_options(CompileOptions { include_dirs: &dirs, ..Default::default() }).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "include folder {bad:?}: {err}");
    }
}

/// A kernel slow enough that a consumer not ordered after it reads its output too early.
fn slow_copy() -> CustomKernel {
    common::vouched_kernel(&KernelSpec {
        name: "slow_copy",
        inputs: &[("x", DType::F32)],
        outputs: &[("y", DType::F32)],
        scalars: &[("spins", DType::I64)],
        body: "const uint64_t i = thread_index(); volatile float acc = 0.0f;\n\
               for (i64 s = 0; s < spins; s++) acc = acc + 1.0f;\n\
               y[i] = x[i] + (acc - (float)spins);",
        ..Default::default()
    })
    .unwrap()
}

fn plus_one() -> CustomKernel {
    common::vouched_kernel(&KernelSpec {
        name: "plus_one",
        inputs: &[("x", DType::F32)],
        outputs: &[("y", DType::F32)],
        body: "y[thread_index()] = x[thread_index()] + 1.0f;",
        ..Default::default()
    })
    .unwrap()
}

/// Explicit stream -> default stream -> explicit stream: each consumer waits for its producer
/// on the other stream (the library orders them with events), so every value is exact.
fn explicit_stream_launches_are_ordered(device: Device) {
    let _turn = common::serial();
    let (slow, plus) = (slow_copy(), plus_one());
    let side = Stream::new(device).unwrap();
    let n = 256usize;
    let spins = if device.kind() == jitbridge::DeviceKind::Cpu { 20_000 } else { 200_000 };
    for round in 0..5 {
        let data: Vec<f32> = (0..n).map(|i| (i * 7 + round) as f32).collect();
        let x = Array::from_slice(device, &data, &[n]).unwrap();
        let (spins, t) = ([Scalar::I64(spins)], LaunchShape::Threads(n));
        // Produced on the side stream, consumed on the default one...
        let a = run(&slow, &[&x], &spins, &[n], t, Some(&side)).unwrap();
        let b = run(&plus, &[&a[0]], &[], &[n], t, None).unwrap();
        // ...and produced on the default stream, consumed on the side one.
        let c = run(&slow, &[&b[0]], &spins, &[n], t, None).unwrap();
        let d = run(&plus, &[&c[0]], &[], &[n], t, Some(&side)).unwrap();
        let want: Vec<f32> = data.iter().map(|v| v + 2.0).collect();
        assert_eq!(d[0].to_vec::<f32>().unwrap(), want, "round {round}: out of order");
        side.synchronize().unwrap();
    }
    // A stream of the thread's own making, installed or not, is the same kind of stream.
    let own = streams::new_thread_local_generation_stream(device).unwrap();
    let x = Array::arange(device, 4, DType::F32).unwrap();
    let y = run(&plus, &[&x], &[], &[4], LaunchShape::Threads(4), Some(&own)).unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0]);
}

/// A configure hook that captures state: it runs once and sees what it captured.
fn configure_hooks_capture_state(device: Device) {
    let _turn = common::serial();
    let calls = Arc::new(AtomicUsize::new(0));
    let threads_per_block = 32u32;
    let counted = calls.clone();
    let kernel = common::vouched_kernel(&KernelSpec {
        name: "captured_hook",
        inputs: &[("x", DType::F32)],
        outputs: &[("y", DType::F32)],
        body: "y[thread_index()] = x[thread_index()];",
        options: CompileOptions { defines: &["CAPTURED_HOOK_TEST"], ..Default::default() },
        configure: Some(Arc::new(move |_device| {
            counted.fetch_add(1, Ordering::SeqCst);
            Some(KernelConfig { threads_per_block, shared_memory_bytes: 0 })
        })),
        ..Default::default()
    })
    .unwrap();
    let x = Array::arange(device, 100, DType::F32).unwrap();
    for _ in 0..3 {
        let y = run(&kernel, &[&x], &[], &[100], LaunchShape::Threads(100), None).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap()[99], 99.0);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    drop(kernel);
    assert_eq!(Arc::strong_count(&calls), 1, "the kernel let go of its hook");
}

macro_rules! feature_tests {
    ($module:ident, $device:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn scalars_pass_by_value() {
                super::scalars_pass_by_value($device);
            }

            #[test]
            fn parameters_make_distinct_modules() {
                super::parameters_make_distinct_modules($device);
            }

            #[test]
            fn options_change_the_key() {
                super::options_change_the_key($device);
            }

            #[test]
            fn explicit_stream_launches_are_ordered() {
                super::explicit_stream_launches_are_ordered($device);
            }

            #[test]
            fn configure_hooks_capture_state() {
                super::configure_hooks_capture_state($device);
            }
        }
    };
}

feature_tests!(cpu, Device::cpu().unwrap());
#[cfg(any(feature = "cuda", feature = "rocm"))]
feature_tests!(gpu, Device::gpu(0).unwrap());
