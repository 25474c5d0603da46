//! JITBRIDGE_BOUNDS_CHECKS=1 bounds-checks every kernel of the process, whatever its options:
//! a kernel made without them launches safely and reports an index out of range. One test in
//! this binary: it sets the environment before the library reads it.

mod common;

use jitbridge::{Array, DType, Device, ErrorCode, KernelSpec, LaunchShape};

#[test]
fn the_environment_checks_every_kernel() {
    // SAFETY: the only test of this binary, before any kernel is made (the library reads the
    // variable once, at the first) and before any thread of its own starts.
    unsafe { std::env::set_var("JITBRIDGE_BOUNDS_CHECKS", "1") };
    let kernel = common::vouched_kernel(&KernelSpec {
        name: "checked_by_the_environment",
        inputs: &[("x", DType::F32)],
        outputs: &[("y", DType::F32)],
        body: "y[thread_index()] = x[thread_index()] * 2.0f;",
        ..Default::default()
    })
    .unwrap();
    assert!(kernel.bounds_checked(), "JITBRIDGE_BOUNDS_CHECKS=1 did not check the kernel");
    let x = Array::arange(Device::cpu().unwrap(), 8, DType::F32).unwrap();
    let y = kernel.launch(&[&x], &[&[8]], LaunchShape::Threads(8)).unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap()[7], 14.0);
    let y = kernel.launch(&[&x], &[&[8]], LaunchShape::Threads(9)).unwrap();
    let err = y[0].eval().unwrap_err();
    assert_eq!(err.code(), ErrorCode::Bounds);
    // y[8] or x[8]: which a thread evaluates first is the compiler's choice.
    assert!(err.message().contains("thread 8 indexed array '"), "{err}");
    assert!(err.message().contains("' at 8, outside its 8 elements"), "{err}");
}
