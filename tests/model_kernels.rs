//! The examples' RMSNorm and rotary kernels (bf16, head dim a compile-time parameter) within
//! their stated tolerance of an f64 reference, for head dims 64 and 128.

// Keeps the kernels' compiled code off the user's disk cache (a folder of this process's own).
mod common;

#[path = "../examples/model_kernels.rs"]
mod model_kernels;

#[test]
fn rmsnorm_and_rotary_match_the_reference_on_cpu() {
    let lines = model_kernels::run(jitbridge::Device::cpu().unwrap()).unwrap();
    assert_eq!(lines.len(), 4, "{lines:?}");
}

#[cfg(any(feature = "cuda", feature = "rocm"))]
#[test]
fn rmsnorm_and_rotary_match_the_reference_on_gpu() {
    let lines = model_kernels::run(jitbridge::Device::gpu(0).unwrap()).unwrap();
    assert_eq!(lines.len(), 4, "{lines:?}");
}
