//! Half arithmetic and dtype-generic bodies: `f16` and `bf16` are arithmetic types in a body,
//! computed in f32 and rounded to nearest even where a value is stored, assigned or cast, so
//! one body text (MLX's `T tmp = a[0];` with a dtype parameter `T`) runs for f32, f16 and bf16.
//! Every expected value is computed here with the crate's own f16/bf16 conversions. On a cpu
//! compiler without an arithmetic `__bf16` (gcc 12, clang 14) bf16 stays a storage type there,
//! and a bf16 body doing arithmetic is a compile error at the body's line. The GPU's source of
//! every body compiles with nvcc where the toolkit is installed (a GPU build runs it too).

mod common;

use jitbridge::{
    Array, Bf16, CompileOptions, DType, Device, ErrorCode, F16, KernelSpec, Launch, LaunchShape,
    Output, Param, Scalar,
};

/// `v` rounded to the nearest value of `dtype` (f32, f16 or bf16), ties to even.
fn round(dtype: DType, v: f32) -> f32 {
    match dtype {
        DType::F16 => F16::from_f32(v).to_f32(),
        DType::Bf16 => Bf16::from_f32(v).to_f32(),
        _ => v,
    }
}

fn array_of(device: Device, dtype: DType, values: &[f32]) -> Array {
    let shape = [values.len()];
    match dtype {
        DType::F16 => Array::from_slice(device, &F16::from_f32_slice(values), &shape),
        DType::Bf16 => Array::from_slice(device, &Bf16::from_f32_slice(values), &shape),
        _ => Array::from_slice(device, values, &shape),
    }
    .unwrap()
}

fn values_of(a: &Array) -> Vec<f32> {
    match a.dtype() {
        DType::F16 => F16::to_f32_vec(&a.to_vec::<F16>().unwrap()),
        DType::Bf16 => Bf16::to_f32_vec(&a.to_vec::<Bf16>().unwrap()),
        _ => a.to_vec::<f32>().unwrap(),
    }
}

/// The same bits, or both NaN (a NaN's payload may differ between backends: docs/KERNELS.md),
/// or, with `ulps` above 0, finite values of one sign at most `ulps` units in the last place
/// apart.
fn same(got: &[f32], want: &[f32], ulps: u32) -> bool {
    let near = |g: f32, w: f32| {
        g.is_finite()
            && w.is_finite()
            && g.is_sign_negative() == w.is_sign_negative()
            && g.to_bits().abs_diff(w.to_bits()) <= ulps
    };
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()) || near(*g, *w))
}

/// Runs `body` with a dtype parameter `T`: input `a` of dtype T, input `s` of f32, an i32
/// scalar `n`, output `out` of dtype T, one thread per element.
fn run_generic(
    device: Device,
    name: &str,
    t: DType,
    body: &str,
    a: &[f32],
    s: &[f32],
    n: i32,
) -> Result<Vec<f32>, jitbridge::Error> {
    let kernel = common::vouched_kernel(&KernelSpec {
        name,
        inputs: &[("a", t), ("s", DType::F32)],
        outputs: &[("out", t)],
        scalars: &[("n", DType::I32)],
        params: &[("T", Param::DType(t))],
        body,
        options: CompileOptions { bounds_checks: true, ..Default::default() },
        ..Default::default()
    })?;
    let len = a.len();
    let (a, s) = (array_of(device, t, a), array_of(device, DType::F32, s));
    let out = kernel.launch_with(Launch {
        inputs: &[&a, &s],
        scalars: &[Scalar::I32(n)],
        outputs: &mut [Output::New(&[len])],
        shape: LaunchShape::Threads(len),
        ..Default::default()
    })?;
    Ok(values_of(&out[0]))
}

/// `d` rounded to f32 to odd (an inexact result with an even last bit moves one unit toward
/// `d`): rounding that f32 to a half type gives the same as rounding `d` there directly.
fn odd_f32(d: f64) -> f32 {
    let f = d as f32;
    if d.is_nan() || f as f64 == d || f.to_bits() & 1 == 1 {
        return f;
    }
    let toward = if (f as f64).abs() < d.abs() { f.to_bits() + 1 } else { f.to_bits() - 1 };
    f32::from_bits(toward)
}

/// A body, and what it computes for one element from `x` (a's element, already of dtype T),
/// `s` and `n`, rounding with the given function (from f64: every f32 converts exactly) where
/// the body stores or casts to T.
struct Case {
    name: &'static str,
    body: &'static str,
    want: fn(&dyn Fn(f64) -> f32, f32, f32, i32) -> f32,
}

fn cases() -> Vec<Case> {
    vec![
        // MLX's generic-T kernel, with arithmetic on T.
        Case {
            name: "generic_square",
            body: "const uint64_t i = thread_index(); T x = a[i]; out[i] = x * x + (T)1;",
            want: |r, x, _, _| r((x * x + r(1.0)) as f64),
        },
        // Computed in f32 and rounded once where stored: x * x - 1 keeps x * x's low bits
        // (rounding x * x to T first would lose them for x = 1 + 3/1024).
        Case {
            name: "generic_once_rounded",
            body: "const uint64_t i = thread_index(); T x = a[i]; out[i] = x * x - (T)1;",
            want: |r, x, _, _| r((x * x - 1.0) as f64),
        },
        // Mixed: T times an f32 element and an int scalar cast to f32 (in f32), then T plus T
        // times a small int constant (exact in T: gcc and GPUs convert an int operand to f32,
        // clang to T first; docs/KERNELS.md).
        Case {
            name: "generic_mixed",
            body: "const uint64_t i = thread_index(); T x = a[i]; \
                   out[i] = x * s[i] + x * (float)n; out[i] += x * 3;",
            want: |r, x, s, n| r((r((x * s + x * n as f32) as f64) + x * 3.0) as f64),
        },
        // Compound assignments and increments round at each step, as `y = (T)(y + v)`.
        Case {
            name: "generic_compound",
            body: "const uint64_t i = thread_index(); T y = a[i]; y += s[i]; y *= 3; y++; \
                   y -= (T)0.5f; out[i] = y;",
            want: |r, x, s, _| {
                let f = |v: f32| r(v as f64);
                f(f(f(f(x + s) * 3.0) + 1.0) - 0.5)
            },
        },
        // Storing an f32 rounds to nearest even: ties, subnormals, overflow, inf and NaN.
        Case {
            name: "generic_store_f32",
            body: "const uint64_t i = thread_index(); T y = s[i]; out[i] = y;",
            want: |r, _, s, _| r(s as f64),
        },
        // A double just above a tie of T rounds up: one rounding, not two through f32.
        Case {
            name: "generic_store_f64",
            body: "const uint64_t i = thread_index(); out[i] = (T)((double)s[i] + 0x1p-40);",
            want: |r, _, s, _| r(s as f64 + 2f64.powi(-40)),
        },
    ]
}

/// Inputs: `a` holds edge values of the halves (converted to T on the way in), `s` ties of
/// f16 and bf16 (1 + 2^-11, 1 + 3 * 2^-11, 1 + 2^-8, 1 + 3 * 2^-8), f16 subnormals and their
/// halfway points, the largest f16 and the first f32 values that overflow it, inf and NaN.
fn inputs() -> (Vec<f32>, Vec<f32>) {
    let a = vec![
        0.0,
        -0.0,
        1.0,
        -2.5,
        1.0 + 3.0 / 1024.0,
        255.0,
        65504.0,
        2f32.powi(-24),
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        300.0,
        -0.1,
        1.0e30,
    ];
    let s = vec![
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        1.0 + 2f32.powi(-8),
        1.0 + 3.0 * 2f32.powi(-8),
        2f32.powi(-25),
        3.0 * 2f32.powi(-25),
        65519.0,
        65520.0,
        -65520.0,
        f32::INFINITY,
        f32::NAN,
        1.0e-40,
        -3.0e38,
        0.1,
    ];
    (a, s)
}

/// Every case for dtype `t` on `device`, each checked against its expected values: exact, but
/// for f32 on a GPU, which fuses `a * b + c` into one rounding (docs/KERNELS.md), where each of
/// a case's two fusions may move the result by a unit in the last place (an H100 gave
/// 2.0521001e33 for 2.0521e33).
fn check_dtype(device: Device, t: DType) {
    let ulps = if t == DType::F32 && device.backend() != "cpu" { 2 } else { 0 };
    let (a, s) = inputs();
    let r = |d: f64| if t == DType::F32 { d as f32 } else { round(t, odd_f32(d)) };
    let n = 2049;
    for case in cases() {
        let name = format!("{}_{}", case.name, t.name());
        let got = run_generic(device, &name, t, case.body, &a, &s, n)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let want: Vec<f32> =
            a.iter().zip(&s).map(|(&x, &sv)| (case.want)(&r, round(t, x), sv, n)).collect();
        assert!(same(&got, &want, ulps), "{name} on {device:?}:\n got  {got:?}\n want {want:?}");
    }
}

/// Whether the cpu compiler's bf16 is arithmetic (it has `__bf16`, as gcc 13 and clang 17 do).
fn cpu_bf16_is_arithmetic(cpu: Device) -> bool {
    let probe = common::vouched_kernel(&KernelSpec {
        name: "probe_bf16",
        outputs: &[("y", DType::U8)],
        body: "#ifdef __BFLT16_MAX__\ny[0] = 1;\n#else\ny[0] = 0;\n#endif",
        options: CompileOptions { bounds_checks: true, ..Default::default() },
        ..Default::default()
    })
    .unwrap();
    let out = probe
        .launch_with(Launch {
            outputs: &mut [Output::New(&[1])],
            shape: LaunchShape::Threads(1),
            device: Some(cpu),
            ..Default::default()
        })
        .unwrap();
    out[0].to_vec::<u8>().unwrap()[0] == 1
}

#[test]
fn f32_and_f16_bodies_compute_the_hosts_values_on_the_cpu() {
    let cpu = Device::cpu().unwrap();
    check_dtype(cpu, DType::F32);
    check_dtype(cpu, DType::F16);
}

#[test]
fn bf16_bodies_compute_the_hosts_values_or_fail_at_the_body_line_on_the_cpu() {
    let cpu = Device::cpu().unwrap();
    if cpu_bf16_is_arithmetic(cpu) {
        check_dtype(cpu, DType::Bf16);
        return;
    }
    let (a, s) = inputs();
    let body = cases()[0].body;
    let e = run_generic(cpu, "generic_square_bf16", DType::Bf16, body, &a, &s, 1).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Compile, "{e}");
    assert!(e.to_string().contains("generic_square_bf16.body:1:"), "{e}");
    // The conversions still work on a storage bf16: the same body, converting by hand.
    let by_hand = "const uint64_t i = thread_index(); float x = bf16_to_f32(a[i]); \
                   out[i] = f32_to_bf16(x * x + 1.0f);";
    let got = run_generic(cpu, "by_hand_bf16", DType::Bf16, by_hand, &a, &s, 1).unwrap();
    let r = |v: f32| round(DType::Bf16, v);
    let want: Vec<f32> = a.iter().map(|&x| r(r(x) * r(x) + 1.0)).collect();
    assert!(same(&got, &want, 0), "got {got:?}\nwant {want:?}");
}

#[cfg(any(feature = "cuda", feature = "rocm"))]
#[test]
fn every_half_body_computes_the_hosts_values_on_the_gpu() {
    let gpu = Device::gpu(0).unwrap();
    for t in [DType::F32, DType::F16, DType::Bf16] {
        check_dtype(gpu, t);
    }
}

/// Statements a GPU's half class must accept as C does: conversions from every number, `?:`
/// of a half and its negation, a half from the other half type, increments and comparisons.
const CONVERSIONS: &str = "{ const uint64_t i = thread_index(); T u = 0; u = 1.5; u = 3; \
    u = (unsigned char)4; u = (long long)5; u = (size_t)6; u = true; if (u) u--; \
    out[i] = u < a[i] ? u : -u; f16 h = u; bf16 b = h; h = (f16)b; out[i] += +b; }";

/// Where nvcc is (`$CUDA_PATH/bin/nvcc`, else /usr/local/cuda's), if it is there.
fn nvcc() -> Option<std::path::PathBuf> {
    let root = std::env::var_os("CUDA_PATH").unwrap_or_else(|| "/usr/local/cuda".into());
    let nvcc = std::path::Path::new(&root).join("bin/nvcc");
    nvcc.is_file().then_some(nvcc)
}

/// The GPU source of every body above, for each dtype, checked and unchecked, compiles with
/// nvcc for sm_75 (bf16 converted in integer code) and sm_90 (cvt.rn): this machine cannot run
/// it, but the text is what NVRTC gets.
#[test]
fn every_half_body_compiles_for_nvidia_gpus() {
    let Some(nvcc) = nvcc() else {
        eprintln!("skipped: no nvcc under $CUDA_PATH or /usr/local/cuda");
        return;
    };
    let dir = std::env::temp_dir().join(format!("jb-half-nvcc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut body: String = cases().iter().map(|c| format!("{{ {} }}\n", c.body)).collect();
    body.push_str(CONVERSIONS);
    for t in [DType::F32, DType::F16, DType::Bf16] {
        for bounds_checks in [false, true] {
            let name = format!("nvcc_{}_{bounds_checks}", t.name());
            let kernel = common::vouched_kernel(&KernelSpec {
                name: &name,
                inputs: &[("a", t), ("s", DType::F32)],
                outputs: &[("out", t)],
                scalars: &[("n", DType::I32)],
                params: &[("T", Param::DType(t))],
                body: &body,
                options: CompileOptions { bounds_checks, ..Default::default() },
                ..Default::default()
            })
            .unwrap();
            let source = dir.join(format!("{name}.cu"));
            std::fs::write(&source, kernel.source("cuda").unwrap()).unwrap();
            for arch in ["sm_75", "sm_90"] {
                let out = std::process::Command::new(&nvcc)
                    .args(["-ptx", "-arch", arch, "-o"])
                    .arg(dir.join(format!("{name}_{arch}.ptx")))
                    .arg(&source)
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "{name} for {arch}:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
