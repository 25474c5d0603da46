//! Custom kernels keyed by their generated source: one name with two bodies is two modules, one
//! identical kernel is one module. Runs on the cpu, and on GPU 0 in a GPU build.

mod common;

use jitbridge::streams;
use jitbridge::{
    Array, Bf16, CompileOptions, Counters, DType, Device, ErrorCode, KernelSpec, LaunchShape,
};
use std::sync::{Arc, Barrier};

const THREADS: usize = 16;
const ROUNDS: usize = 100;

/// Bounds-checked, so launched safely.
fn spec(body: &str) -> KernelSpec<'_> {
    KernelSpec {
        name: "same_name_kernel",
        inputs: &[("inp", DType::F32)],
        outputs: &[("out", DType::F32)],
        body,
        options: CompileOptions { bounds_checks: true, ..Default::default() },
        ..Default::default()
    }
}

/// The seed-004 scenario with bf16 bodies: 16 threads x 100 rounds, one name, each thread's
/// body adds its own index in bf16; every result exactly the thread's index.
fn same_name_different_bf16_bodies(device: Device) {
    let _turn = common::serial();
    for round in 0..ROUNDS {
        let barrier = Arc::new(Barrier::new(THREADS));
        let results: Vec<f32> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let barrier = barrier.clone();
                    s.spawn(move || {
                        let stream = streams::new_thread_local_generation_stream(device).unwrap();
                        let _default =
                            streams::install_thread_local_default_stream(&stream).unwrap();
                        let body = format!(
                            "out[thread_index()] = \
                             f32_to_bf16(bf16_to_f32(inp[thread_index()]) + {t}.0f);"
                        );
                        let kernel = common::vouched_kernel(&KernelSpec {
                            inputs: &[("inp", DType::Bf16)],
                            outputs: &[("out", DType::Bf16)],
                            ..spec(&body)
                        })
                        .unwrap();
                        let input =
                            Array::from_slice(device, &[Bf16::from_f32(0.0)], &[1]).unwrap();
                        barrier.wait();
                        let out =
                            kernel.launch(&[&input], &[&[1]], LaunchShape::Threads(1)).unwrap();
                        out[0].to_vec::<Bf16>().unwrap()[0].to_f32()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let expected: Vec<f32> = (0..THREADS).map(|t| t as f32).collect();
        assert_eq!(results, expected, "round {round}: a thread ran another thread's bf16 body");
    }
}

/// 16 threads, each on its own stream, build a kernel of one name whose body adds the thread's
/// index, meet at a barrier, launch on [0.0] and evaluate: the results are exactly 0..15.
fn same_name_different_bodies(device: Device) {
    let _turn = common::serial();
    for round in 0..ROUNDS {
        let barrier = Arc::new(Barrier::new(THREADS));
        let results: Vec<f32> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let barrier = barrier.clone();
                    s.spawn(move || {
                        let stream = streams::new_thread_local_generation_stream(device).unwrap();
                        let _default =
                            streams::install_thread_local_default_stream(&stream).unwrap();
                        let body = format!("out[thread_index()] = inp[thread_index()] + {t}.0f;");
                        let kernel = common::vouched_kernel(&spec(&body)).unwrap();
                        let input = Array::from_slice(device, &[0.0f32], &[1]).unwrap();
                        barrier.wait();
                        let out =
                            kernel.launch(&[&input], &[&[1]], LaunchShape::Threads(1)).unwrap();
                        out[0].eval().unwrap();
                        out[0].to_vec::<f32>().unwrap()[0]
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let expected: Vec<f32> = (0..THREADS).map(|t| t as f32).collect();
        assert_eq!(results, expected, "round {round}: a thread ran another thread's body");
    }
}

/// 16 threads launching one identical kernel for the first time build it once.
fn identical_kernels_build_once(device: Device) {
    let _turn = common::serial();
    let body = format!("out[thread_index()] = inp[thread_index()] * 4.0f; /* {:?} */", device);
    Counters::reset();
    let barrier = Arc::new(Barrier::new(THREADS));
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let (barrier, body) = (barrier.clone(), &body);
            s.spawn(move || {
                let kernel = common::vouched_kernel(&spec(body)).unwrap();
                let input = Array::from_slice(device, &[2.0f32], &[1]).unwrap();
                barrier.wait();
                let out = kernel.launch(&[&input], &[&[1]], LaunchShape::Threads(1)).unwrap();
                assert_eq!(out[0].to_vec::<f32>().unwrap(), [8.0]);
            });
        }
    });
    let counters = Counters::read();
    // One module: compiled now, or loaded from the disk cache an earlier run filled.
    assert_eq!(
        counters.builds + counters.disk_hits,
        1,
        "one identical kernel became {} modules",
        counters.builds + counters.disk_hits
    );
}

/// A body that does not compile returns the compiler's log, pointing at the body's own line.
fn compile_errors_point_into_the_body(device: Device) {
    let _turn = common::serial();
    let body = "float fine = inp[0];\nout[0] = fine + not_declared_anywhere;";
    let kernel = common::vouched_kernel(&spec(body)).unwrap();
    let input = Array::from_slice(device, &[0.0f32], &[1]).unwrap();
    let err = kernel.launch(&[&input], &[&[1]], LaunchShape::Threads(1)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Compile, "{err}");
    let message = err.message();
    assert!(message.contains("not_declared_anywhere"), "the log names the symbol: {message}");
    // gcc/clang write "same_name_kernel.body:2:", NVRTC and hiprtc "same_name_kernel.body(2)".
    assert!(
        message.contains("same_name_kernel.body:2") || message.contains("same_name_kernel.body(2)"),
        "the line points into the body: {message}"
    );
}

/// Sizes whose arithmetic wraps are refused before anything runs: a thread count within a block
/// of 2^64 wrapped its block count to 0 and was launched (the cpu worker then looped for ever),
/// and an output of 2^40 x 2^40 elements read as 0 elements (a 0-byte output the kernel wrote
/// into). In a child, so that a launch that never ends fails the test instead of hanging it.
#[test]
fn sizes_that_wrap_are_refused() {
    if common::run_in_child("sizes_that_wrap_are_refused", &[]).is_some() {
        return;
    }
    let kernel =
        common::vouched_kernel(&spec("out[thread_index()] = inp[thread_index()];")).unwrap();
    let input = Array::arange(Device::cpu().unwrap(), 8, DType::F32).unwrap();
    for threads in [usize::MAX, usize::MAX - 1, usize::MAX - 255] {
        let err = kernel.launch(&[&input], &[&[8]], LaunchShape::Threads(threads)).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{threads} threads: {err}");
    }
    for shape in [[1usize << 40, 1 << 40], [1 << 32, 1 << 32]] {
        let err = kernel.launch(&[&input], &[&shape], LaunchShape::Threads(8)).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "an output of {shape:?}: {err}");
    }
}

macro_rules! custom_kernel_tests {
    ($module:ident, $device:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn same_name_different_bodies_are_different_kernels() {
                same_name_different_bodies($device);
            }

            #[test]
            fn same_name_different_bf16_bodies_are_different_kernels() {
                same_name_different_bf16_bodies($device);
            }

            #[test]
            fn identical_kernels_from_many_threads_build_once() {
                identical_kernels_build_once($device);
            }

            #[test]
            fn compile_errors_point_into_the_body() {
                super::compile_errors_point_into_the_body($device);
            }
        }
    };
}

custom_kernel_tests!(cpu, Device::cpu().unwrap());
#[cfg(any(feature = "cuda", feature = "rocm"))]
custom_kernel_tests!(gpu, Device::gpu(0).unwrap());
