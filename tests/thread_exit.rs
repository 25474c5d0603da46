//! A thread's exit lets go of its default stream without waiting for the work queued there
//! (jitbridge.h, "Streams"): a server thread that launches a long kernel and exits is joined
//! long before the kernel ends, and the kernel's output is still right, read by a thread that
//! launched nothing. Runs on the cpu, and on GPU 0 in a GPU build (where the exit used to
//! synchronize the thread's driver stream).

mod common;

use jitbridge::{Array, CompileOptions, CustomKernel, DType, Device, KernelSpec, LaunchShape};
use std::time::{Duration, Instant};

/// One thread's dependent steps: a few hundred milliseconds on a cpu core or a GPU. The value
/// converges to 2 whatever the input, and no compiler folds a float loop without fast math.
const SLOW_BODY: &str = "float v = inp[0];
for (i64 k = 0; k < 50000000; k++) v = v * 0.5f + 1.0f;
out[0] = v;";

fn slow_kernel() -> CustomKernel {
    common::vouched_kernel(&KernelSpec {
        name: "thread_exit_slow",
        inputs: &[("inp", DType::F32)],
        outputs: &[("out", DType::F32)],
        body: SLOW_BODY,
        options: CompileOptions { bounds_checks: true, ..Default::default() },
        ..Default::default()
    })
    .unwrap()
}

fn launch_slow(kernel: &CustomKernel, input: &Array) -> Array {
    kernel.launch(&[input], &[&[1]], LaunchShape::Threads(1)).unwrap().remove(0)
}

fn exit_does_not_wait_for_queued_work(device: Device) {
    let _turn = common::serial();
    let kernel = slow_kernel();
    let input = Array::from_slice(device, &[1.0f32], &[1]).unwrap();
    launch_slow(&kernel, &input).eval().unwrap(); // built and loaded: the next launches are warm
    let start = Instant::now();
    launch_slow(&kernel, &input).eval().unwrap();
    let kernel_time = start.elapsed();

    let start = Instant::now();
    let out = std::thread::scope(|s| s.spawn(|| launch_slow(&kernel, &input)).join().unwrap());
    let exit_time = start.elapsed();
    assert!(
        exit_time < kernel_time / 2,
        "a thread that launched a {kernel_time:?} kernel and exited was joined after \
         {exit_time:?}: its exit waited for the work queued on its default stream"
    );
    // Read on a thread that launches nothing (no stream of its own), while the work may run.
    let value = std::thread::scope(|s| s.spawn(|| out.to_vec::<f32>().unwrap()).join().unwrap());
    assert_eq!(value, [2.0], "the exited thread's output");
    eprintln!("{device:?}: kernel {kernel_time:?}, the launching thread's exit {exit_time:?}");
    assert!(kernel_time > Duration::from_millis(20), "the kernel ran {kernel_time:?}: too short");
}

#[test]
fn cpu_exit_does_not_wait_for_queued_work() {
    exit_does_not_wait_for_queued_work(Device::cpu().unwrap());
}

#[cfg(any(feature = "cuda", feature = "rocm"))]
#[test]
fn gpu_exit_does_not_wait_for_queued_work() {
    exit_does_not_wait_for_queued_work(Device::gpu(0).unwrap());
}
