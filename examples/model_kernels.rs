//! Two kernels an inference server JITs, in bf16 with the head dim fixed at compile time:
//! RMSNorm over each row and rotary position embedding (the half-split form of GPT-NeoX and
//! Llama). Each runs for head dims 64 and 128 (two modules per kernel, one name) on the cpu and
//! on GPU 0 when there is one, and is checked against a plain f64 reference.
//!
//! The kernels are bounds-checked (every `x[i]` checked), so they launch with the safe
//! `launch_with`; a server that has tested them can drop `bounds_checks` and launch them with
//! the unsafe `launch_with_unchecked`.
//!
//! Tolerance: |got - want| <= |want| / 128 + slack, that is two bf16 units in the last place
//! (the output's own rounding is half of one; f32 math inside the kernel accounts for the rest),
//! with slack 1e-6 for RMSNorm and 1e-3 for rotary, whose angles (up to 222 radians here) are
//! computed in f32 and whose outputs can be near zero.
//!
//!     cargo run --example model_kernels

use jitbridge::{
    Array, Bf16, CompileOptions, CustomKernel, DType, Device, KernelSpec, Launch, LaunchShape,
    Output, Param, Scalar,
};

/// One thread per row: a per-row reduction, each thread its own row, in any order.
pub const RMSNORM: &str = "\
const uint64_t row = thread_index(), at = row * HEAD_DIM;
if (at >= x_size) return;
float sum = 0.0f;
for (int i = 0; i < HEAD_DIM; i++) { float v = bf16_to_f32(x[at + i]); sum += v * v; }
const float scale = 1.0f / sqrtf(sum / HEAD_DIM + eps);
for (int i = 0; i < HEAD_DIM; i++)
    y[at + i] = f32_to_bf16(bf16_to_f32(x[at + i]) * scale * bf16_to_f32(weight[i]));";

/// One thread per (token, head, i < HEAD_DIM / 2): rotates the pair (i, i + HEAD_DIM / 2).
pub const ROTARY: &str = "\
const uint64_t t = thread_index();
const uint64_t half = HEAD_DIM / 2, pair = t % half, vec = t / half;
if (heads <= 0 || vec * HEAD_DIM >= x_size) return;
const uint64_t token = vec / heads;
const float inv_freq = powf(base, -2.0f * (float)pair / (float)HEAD_DIM);
const float angle = (float)positions[token] * inv_freq;
const float c = cosf(angle), s = sinf(angle);
const uint64_t at = vec * HEAD_DIM;
const float a = bf16_to_f32(x[at + pair]), b = bf16_to_f32(x[at + pair + half]);
y[vec * HEAD_DIM + pair] = f32_to_bf16(a * c - b * s);
y[vec * HEAD_DIM + pair + half] = f32_to_bf16(b * c + a * s);";

/// The kernel `name` running `body` with `HEAD_DIM = head_dim`: RMSNorm's inputs and scalar,
/// or rotary's.
///
/// # Safety
///
/// As for [`CustomKernel::new`]: `body` with that `HEAD_DIM` does nothing undefined, for any
/// launch, apart from subscripting its arrays out of range.
pub unsafe fn kernel(
    name: &str,
    body: &str,
    head_dim: i64,
    rotary: bool,
) -> Result<CustomKernel, jitbridge::Error> {
    let inputs: &[(&str, DType)] = if rotary {
        &[("x", DType::Bf16), ("positions", DType::I32)]
    } else {
        &[("x", DType::Bf16), ("weight", DType::Bf16)]
    };
    let scalars: &[(&str, DType)] = if rotary {
        &[("base", DType::F32), ("heads", DType::I64)]
    } else {
        &[("eps", DType::F32)]
    };
    // SAFETY: the caller's promise.
    unsafe {
        CustomKernel::new(&KernelSpec {
            name,
            inputs,
            outputs: &[("y", DType::Bf16)],
            scalars,
            params: &[("HEAD_DIM", Param::Int(head_dim))],
            body,
            options: CompileOptions { bounds_checks: true, ..Default::default() },
            ..Default::default()
        })
    }
}

/// A deterministic pseudo-random value in [-2, 2), rounded to bf16.
fn value(i: usize, salt: u64) -> Bf16 {
    let mut h = (i as u64 ^ salt).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 29;
    Bf16::from_f32(((h % 4096) as f32 / 1024.0) - 2.0)
}

/// Checks every element against the tolerance; returns the worst error as a fraction of it.
fn check(what: &str, got: &[Bf16], want: &[f64], slack: f64) -> Result<f64, String> {
    let mut worst = 0.0f64;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (err, allowed) = ((g.to_f32() as f64 - w).abs(), w.abs() / 128.0 + slack);
        if err > allowed {
            return Err(format!("{what}: element {i} is {} but the reference is {w}", g.to_f32()));
        }
        worst = worst.max(err / allowed);
    }
    Ok(worst)
}

/// Runs both kernels for head dims 64 and 128 on `device`; returns a line per check.
pub fn run(device: Device) -> Result<Vec<String>, String> {
    let e = |e: jitbridge::Error| e.to_string();
    let mut report = Vec::new();
    let (tokens, heads) = (7usize, 3usize);
    for head_dim in [64usize, 128] {
        let rows = tokens * heads;
        let n = rows * head_dim;
        let x: Vec<Bf16> = (0..n).map(|i| value(i, head_dim as u64)).collect();
        let weight: Vec<Bf16> = (0..head_dim).map(|i| value(i, 77)).collect();
        let xa = Array::from_slice(device, &x, &[n]).map_err(e)?;

        // RMSNorm: one thread per row.
        let eps = 1e-5f32;
        // SAFETY: RMSNORM divides floats only (by a sum plus eps, by HEAD_DIM, 64 or 128) and
        // subscripts its arrays.
        let norm = unsafe { kernel("rmsnorm_bf16", RMSNORM, head_dim as i64, false) }.map_err(e)?;
        let wa = Array::from_slice(device, &weight, &[head_dim]).map_err(e)?;
        let out = norm
            .launch_with(Launch {
                inputs: &[&xa, &wa],
                scalars: &[Scalar::F32(eps)],
                outputs: &mut [Output::New(&[n])],
                shape: LaunchShape::Threads(rows),
                ..Default::default()
            })
            .map_err(e)?;
        let got = out[0].to_vec::<Bf16>().map_err(e)?;
        let mut want = Vec::with_capacity(n);
        for row in x.chunks(head_dim) {
            let mean =
                row.iter().map(|v| (v.to_f32() as f64).powi(2)).sum::<f64>() / head_dim as f64;
            let scale = 1.0 / (mean + eps as f64).sqrt();
            want.extend(
                row.iter().zip(&weight).map(|(v, w)| v.to_f32() as f64 * scale * w.to_f32() as f64),
            );
        }
        let worst = check("rmsnorm", &got, &want, 1e-6)?;
        report.push(format!(
            "rmsnorm  head_dim {head_dim:3} module {}: worst error {:.0}% of the tolerance",
            norm.module_name(),
            worst * 100.0
        ));

        // Rotary: one thread per (token, head, pair).
        let base = 10000.0f32;
        let positions: Vec<i32> = (0..tokens as i32).map(|t| t * 37 + 5).collect();
        let pa = Array::from_slice(device, &positions, &[tokens]).map_err(e)?;
        // SAFETY: ROTARY divides by HEAD_DIM / 2 (32 or 64) and by `heads` only when it is
        // positive, and subscripts its arrays.
        let rope = unsafe { kernel("rotary_bf16", ROTARY, head_dim as i64, true) }.map_err(e)?;
        let out = rope
            .launch_with(Launch {
                inputs: &[&xa, &pa],
                scalars: &[Scalar::F32(base), Scalar::I64(heads as i64)],
                outputs: &mut [Output::New(&[n])],
                shape: LaunchShape::Threads(rows * head_dim / 2),
                ..Default::default()
            })
            .map_err(e)?;
        let got = out[0].to_vec::<Bf16>().map_err(e)?;
        let mut want = vec![0.0f64; n];
        let half = head_dim / 2;
        for vec in 0..rows {
            let pos = positions[vec / heads] as f64;
            for p in 0..half {
                let angle = pos * (base as f64).powf(-2.0 * p as f64 / head_dim as f64);
                let (s, c) = angle.sin_cos();
                let a = x[vec * head_dim + p].to_f32() as f64;
                let b = x[vec * head_dim + p + half].to_f32() as f64;
                want[vec * head_dim + p] = a * c - b * s;
                want[vec * head_dim + p + half] = b * c + a * s;
            }
        }
        let worst = check("rotary", &got, &want, 1e-3)?;
        report.push(format!(
            "rotary   head_dim {head_dim:3} module {}: worst error {:.0}% of the tolerance",
            rope.module_name(),
            worst * 100.0
        ));
    }
    Ok(report)
}

#[allow(dead_code)] // also compiled into tests/model_kernels.rs, which calls `run`
fn main() {
    let mut devices = vec![Device::cpu().expect("the cpu device")];
    if let Ok(gpu) = Device::gpu(0) {
        devices.push(gpu);
    }
    for device in devices {
        println!("{} ({}):", device.name(), device.backend());
        match run(device) {
            Ok(lines) => lines.iter().for_each(|l| println!("  {l}")),
            Err(problem) => {
                eprintln!("  FAILED: {problem}");
                std::process::exit(1);
            }
        }
    }
}
