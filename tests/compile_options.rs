//! The compiler options of a build (sys_tools::compile_with, bench section 11): the library's own
//! options make the same code as the plain ones, every body that compiled before still compiles,
//! and bad requests get clear errors. NVRTC runs without a GPU, so the cuda checks run wherever
//! the cuda backend is built in.

mod common;

use jitbridge::ErrorCode;
use jitbridge::sys_tools::{CompileOptions, compile_with};
#[cfg(feature = "cuda")]
use jitbridge::{CompileOptions as KernelOptions, CustomKernel, DType, KernelSpec};

/// A kernel of one f32 input, one f32 output and one f32 scalar `step`, only ever compiled here.
#[cfg(feature = "cuda")]
fn kernel(name: &str, body: &str, bounds_checks: bool) -> CustomKernel {
    // SAFETY: these kernels are compiled by NVRTC and compared, never loaded or launched, so
    // none of their code runs.
    unsafe {
        CustomKernel::new(&KernelSpec {
            name,
            inputs: &[("x", DType::F32)],
            outputs: &[("out", DType::F32)],
            scalars: &[("step", DType::F32)],
            body,
            options: KernelOptions { bounds_checks, ..Default::default() },
            ..Default::default()
        })
    }
    .unwrap()
}

#[test]
fn the_cpu_compiler_takes_its_own_flags_or_more() {
    let k = common::salted_kernel("compile_options_cpu", 3, 11);
    let own = compile_with(&k, "cpu", CompileOptions::Own { arch: None }, None).unwrap();
    assert!(own.code_bytes > 0 && own.compile_ns > 0.0, "{own:?}");
    assert_eq!(own.load_ns, 0.0, "loaded without a device to load on");
    let cpu = jitbridge::Device::cpu().unwrap();
    let flags = ["-O2", "-fPIC", "-shared", "-w"];
    for extra in ["-pipe", "-O1", "-O3"] {
        let options = [&flags[..], &[extra]].concat();
        let cost = compile_with(&k, "cpu", CompileOptions::These(&options), Some(cpu)).unwrap();
        assert!(cost.code_bytes > 0 && cost.load_ns > 0.0, "{options:?}: {cost:?}");
    }
    // In place of the fixed flags: without -shared there is no .so to load.
    let e = compile_with(&k, "cpu", CompileOptions::These(&["-O2", "-fPIC"]), None)
        .expect_err("no -shared: the link wants a main");
    assert_eq!(e.code(), ErrorCode::Compile, "{e}");
    let e = compile_with(&k, "cpu", CompileOptions::These(&["-fno-such-option-at-all"]), None)
        .expect_err("an option the compiler refuses");
    assert_eq!(e.code(), ErrorCode::Compile, "{e}");
}

#[test]
fn bad_requests_are_refused_clearly() {
    let k = common::salted_kernel("compile_options_bad", 3, 12);
    let e = compile_with(&k, "tpu", CompileOptions::Own { arch: None }, None).unwrap_err();
    assert!(e.message().contains("no backend 'tpu' in this build"), "{e}");
    let e = compile_with(&k, "cpu", CompileOptions::These(&["-O1\0"]), None).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e}");
    let cpu = jitbridge::Device::cpu().unwrap();
    let e = compile_with(&k, "cuda", CompileOptions::Own { arch: Some("sm_90") }, Some(cpu))
        .unwrap_err();
    assert!(e.message().contains("code compiled for cuda cannot be loaded on"), "{e}");
}

/// Bodies the library's tests and users write: plain arithmetic, math functions, atomics and
/// fences, shared memory and warp shuffles, printf, f16/bf16 conversions (the prelude's inline
/// asm), and a bounds-checked kernel (whose checked access uses memset and atomicCAS).
#[cfg(feature = "cuda")]
const BODIES: [(&str, bool); 7] = [
    ("const uint64_t i = thread_index(); if (i < out_size) out[i] = x[i] * 3.0f + step;", false),
    (
        "const uint64_t i = thread_index(); if (i < out_size) out[i] = expf(x[i]) + tanhf(step) \
         + sqrtf(fabsf(x[i])) + erff(step) + powf(step, 2.0f);",
        false,
    ),
    (
        "atomicAdd(&out[0], x[0]); __threadfence(); \
         atomicCAS((unsigned int *)&out[1], 0u, __float_as_uint(step));",
        false,
    ),
    (
        "__shared__ float s[32]; s[threadIdx.x % 32] = x[0]; __syncthreads(); \
         out[0] = s[0] + __shfl_down_sync(0xffffffffu, step, 1);",
        false,
    ),
    ("if (thread_index() == 0) printf(\"step %f\\n\", step);", false),
    (
        "const uint64_t i = thread_index(); if (i < out_size) \
         out[i] = f16_to_f32(f32_to_f16(x[i])) + bf16_to_f32(f32_to_bf16(step));",
        false,
    ),
    ("const uint64_t i = thread_index(); out[i] = x[i] + step;", true),
];

/// The library's own NVRTC options (-minimal) make the very cubin that the architecture alone
/// makes, for every kind of body; a body that needs a default header -minimal leaves out
/// (runtime-API and texture types) still compiles, to the same cubin: the library compiles it
/// again without -minimal, which alone refuses it.
#[cfg(feature = "cuda")]
#[test]
fn nvrtc_own_options_make_the_same_cubins_and_refuse_nothing_that_compiled() {
    let plain = CompileOptions::These(&["--gpu-architecture=sm_90"]);
    let own = CompileOptions::Own { arch: Some("sm_90") };
    for (i, &(body, bounds_checks)) in BODIES.iter().enumerate() {
        let k = kernel(&format!("compile_options_nvrtc_{i}"), body, bounds_checks);
        let a = compile_with(&k, "cuda", plain, None).unwrap_or_else(|e| panic!("{body}: {e}"));
        let b = compile_with(&k, "cuda", own, None).unwrap_or_else(|e| panic!("{body}: {e}"));
        assert!(a.code_bytes > 0, "{body}");
        assert_eq!(a.code_sha256, b.code_sha256, "the own options changed the code of {body}");
    }
    let needs_headers = kernel(
        "compile_options_nvrtc_headers",
        "cudaError_t e = cudaSuccess; cudaTextureObject_t t = 0; \
         if (thread_index() < out_size) out[thread_index()] = (float)e + (float)t + step;",
        false,
    );
    let minimal = CompileOptions::These(&["--gpu-architecture=sm_90", "-minimal"]);
    let e = compile_with(&needs_headers, "cuda", minimal, None)
        .expect_err("-minimal alone leaves cudaError_t out");
    assert_eq!(e.code(), ErrorCode::Compile, "{e}");
    let a = compile_with(&needs_headers, "cuda", plain, None).unwrap();
    let b = compile_with(&needs_headers, "cuda", own, None)
        .unwrap_or_else(|e| panic!("a body that needs the default headers: {e}"));
    assert_eq!(a.code_sha256, b.code_sha256);

    // A body that is wrong stays refused, with the compiler's log.
    let wrong = kernel("compile_options_nvrtc_wrong", "out[0] = no_such_name;", false);
    let e = compile_with(&wrong, "cuda", own, None).expect_err("an undefined name");
    assert_eq!(e.code(), ErrorCode::Compile, "{e}");
    assert!(e.to_string().contains("no_such_name"), "{e}");

    // PTX for the virtual architecture: other code than the cubin's.
    let k = kernel("compile_options_nvrtc_ptx", BODIES[0].0, false);
    let ptx =
        compile_with(&k, "cuda", CompileOptions::These(&["--gpu-architecture=compute_90"]), None)
            .unwrap();
    let cubin = compile_with(&k, "cuda", plain, None).unwrap();
    assert!(ptx.code_bytes > 0 && ptx.code_sha256 != cubin.code_sha256);
    let e = compile_with(&k, "cuda", CompileOptions::Own { arch: None }, None).unwrap_err();
    assert!(e.message().contains("need an architecture"), "{e}");
}
