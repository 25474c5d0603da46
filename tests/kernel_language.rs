//! One kernel language on every backend: the same bodies (early return, loops, per-row
//! reductions, conditionals, a scalar assigned per thread, shapes, initial values, every dtype)
//! give the same bytes on the cpu and on a GPU, and the bytes a plain Rust reference computes.
//! Each body runs unchecked and bounds-checked. Here (cpu) each is compared with its reference;
//! in a GPU build the GPU's bytes are also compared with the cpu's.

mod common;

use jitbridge::{
    Array, Bf16, CompileOptions, DType, Device, F16, KernelSpec, Launch, LaunchShape, Output,
    Scalar,
};

/// A body, its input (as f32 values, converted to the input dtype), its launch, and the output
/// a reference computes.
struct Case {
    name: &'static str,
    body: &'static str,
    input: DType,
    output: DType,
    values: Vec<f32>,
    input_shape: Vec<usize>,
    output_shape: Vec<usize>,
    shape: LaunchShape,
    scalars: Vec<Scalar>,
    scalar_names: &'static [(&'static str, DType)],
    init: Option<Scalar>,
    want: Vec<u8>,
}

fn f32_bytes(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
    values.into_iter().flat_map(f32::to_le_bytes).collect()
}

/// The f32 values as host data of `dtype`, on `device`.
fn array_of(device: Device, dtype: DType, values: &[f32], shape: &[usize]) -> Array {
    let a = match dtype {
        DType::F32 => Array::from_slice(device, values, shape),
        DType::F64 => {
            Array::from_slice(device, &values.iter().map(|&v| v as f64).collect::<Vec<_>>(), shape)
        }
        DType::F16 => Array::from_slice(device, &F16::from_f32_slice(values), shape),
        DType::Bf16 => Array::from_slice(device, &Bf16::from_f32_slice(values), shape),
        DType::I8 => {
            Array::from_slice(device, &values.iter().map(|&v| v as i8).collect::<Vec<_>>(), shape)
        }
        DType::U8 => {
            Array::from_slice(device, &values.iter().map(|&v| v as u8).collect::<Vec<_>>(), shape)
        }
        DType::I32 => {
            Array::from_slice(device, &values.iter().map(|&v| v as i32).collect::<Vec<_>>(), shape)
        }
        DType::U32 => {
            Array::from_slice(device, &values.iter().map(|&v| v as u32).collect::<Vec<_>>(), shape)
        }
        DType::I64 => {
            Array::from_slice(device, &values.iter().map(|&v| v as i64).collect::<Vec<_>>(), shape)
        }
        DType::Bool => {
            Array::from_slice(device, &values.iter().map(|&v| v != 0.0).collect::<Vec<_>>(), shape)
        }
        DType::I16 => {
            Array::from_slice(device, &values.iter().map(|&v| v as i16).collect::<Vec<_>>(), shape)
        }
        DType::U16 => {
            Array::from_slice(device, &values.iter().map(|&v| v as u16).collect::<Vec<_>>(), shape)
        }
        DType::U64 => {
            Array::from_slice(device, &values.iter().map(|&v| v as u64).collect::<Vec<_>>(), shape)
        }
    };
    a.unwrap()
}

/// An array's contents as bytes, whatever its dtype.
fn bytes_of(a: &Array) -> Result<Vec<u8>, jitbridge::Error> {
    Ok(match a.dtype() {
        DType::F32 => a.to_vec::<f32>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F64 => a.to_vec::<f64>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => a.to_vec::<F16>()?.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect(),
        DType::Bf16 => a.to_vec::<Bf16>()?.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect(),
        DType::I8 => a.to_vec::<i8>()?.iter().map(|&v| v as u8).collect(),
        DType::U8 => a.to_vec::<u8>()?,
        DType::I32 => a.to_vec::<i32>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::U32 => a.to_vec::<u32>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::I64 => a.to_vec::<i64>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::Bool => a.to_vec::<bool>()?.iter().map(|&v| v as u8).collect(),
        DType::I16 => a.to_vec::<i16>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::U16 => a.to_vec::<u16>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::U64 => a.to_vec::<u64>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
    })
}

fn plain(name: &'static str, body: &'static str, values: Vec<f32>, want: Vec<u8>) -> Case {
    let n = values.len();
    Case {
        name,
        body,
        input: DType::F32,
        output: DType::F32,
        values,
        input_shape: vec![n],
        output_shape: vec![n],
        shape: LaunchShape::Threads(n),
        scalars: vec![],
        scalar_names: &[],
        init: None,
        want,
    }
}

fn cases() -> Vec<Case> {
    let xs: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) * 0.5).collect();
    let mut cases = vec![
        // `return` ends one thread: every third thread leaves its element at the initial value.
        Case {
            init: Some(Scalar::F32(-7.0)),
            ..plain(
                "early_return",
                "const uint64_t i = thread_index();\nif (i % 3 == 0) return;\ny[i] = x[i] * 2.0f;",
                xs.clone(),
                f32_bytes(
                    xs.iter().enumerate().map(|(i, &v)| if i % 3 == 0 { -7.0 } else { v * 2.0 }),
                ),
            )
        },
        // Conditionals and a switch.
        plain(
            "conditionals",
            "const uint64_t i = thread_index(); float v = x[i];\n\
             switch (i % 4) { case 0: v = v < 0.0f ? -v : v; break; case 1: v = v * 4.0f; break;\n\
             default: if (v > 1.0f) v = 1.0f; else if (v < -1.0f) v = -1.0f; }\ny[i] = v;",
            xs.clone(),
            f32_bytes(xs.iter().enumerate().map(|(i, &v)| match i % 4 {
                0 => v.abs(),
                1 => v * 4.0,
                _ => v.clamp(-1.0, 1.0),
            })),
        ),
        // A loop with break and continue, and a scalar each thread assigns: its own copy.
        Case {
            scalars: vec![Scalar::I32(3)],
            scalar_names: &[("step", DType::I32)],
            ..plain(
                "loops_and_scalars",
                "const uint64_t i = thread_index(); float acc = 0.0f;\n\
                 for (int k = 0; k < 100; k += step) { if (k % 2) continue; if (k > 3 * (int)(i % 10)) break; acc += 1.0f; }\n\
                 step = step + (int)i;  /* this thread's own */\ny[i] = acc + (float)step;",
                xs.clone(),
                f32_bytes((0..64).map(|i: usize| {
                    let mut acc = 0.0f32;
                    let mut k = 0;
                    while k < 100 {
                        if k % 2 == 1 {
                            k += 3;
                            continue;
                        }
                        if k > 3 * (i % 10) {
                            break;
                        }
                        acc += 1.0;
                        k += 3;
                    }
                    acc + (3 + i) as f32
                })),
            )
        },
    ];
    // A per-row reduction, one thread per row of an 8 x 8 input, using the input's shape.
    let row_sums: Vec<f32> = xs.chunks(8).map(|r| r.iter().sum()).collect();
    cases.push(Case {
        output_shape: vec![8],
        input_shape: vec![8, 8],
        shape: LaunchShape::Threads(8),
        ..plain(
            "row_sums",
            "const uint64_t row = thread_index(); const i64 cols = x_shape[1];\n\
             if (x_ndim != 2 || (i64)row >= x_shape[0]) return;\nfloat sum = 0.0f;\n\
             for (i64 c = 0; c < cols; c++) sum += x[row * cols + c];\ny[row] = sum;",
            xs.clone(),
            f32_bytes(row_sums),
        )
    });
    // Every dtype in and out: (x + 1) * 2 in the output's dtype, through f32 for the floats.
    let small: Vec<f32> = (0..32).map(|i| i as f32 - 10.0).collect();
    for dtype in DType::ALL {
        let body = match dtype {
            DType::F16 => {
                "const uint64_t i = thread_index(); y[i] = f32_to_f16((f16_to_f32(x[i]) + 1.0f) * 2.0f);"
            }
            DType::Bf16 => {
                "const uint64_t i = thread_index(); y[i] = f32_to_bf16((bf16_to_f32(x[i]) + 1.0f) * 2.0f);"
            }
            DType::Bool => "const uint64_t i = thread_index(); y[i] = !x[i];",
            _ => "const uint64_t i = thread_index(); y[i] = (x[i] + 1) * 2;",
        };
        let values: Vec<f32> = match dtype {
            DType::U8 | DType::U16 | DType::U32 | DType::U64 => {
                small.iter().map(|v| v.abs()).collect()
            }
            DType::Bool => small.iter().map(|&v| (v as i32 % 2) as f32).collect(),
            _ => small.clone(),
        };
        let want = {
            let out: Vec<f32> = values.iter().map(|v| (v + 1.0) * 2.0).collect();
            let device = Device::cpu().unwrap();
            match dtype {
                DType::Bool => values.iter().map(|&v| (v == 0.0) as u8).collect(),
                _ => bytes_of(&array_of(device, dtype, &out, &[out.len()])).unwrap(),
            }
        };
        let name: &'static str =
            Box::leak(format!("every_dtype_{}", dtype.name()).into_boxed_str());
        cases.push(Case { input: dtype, output: dtype, ..plain(name, body, values, want) });
    }
    // Half arithmetic: f16 is an arithmetic type, computed in f32 and rounded to nearest even
    // where stored (cast constants, a division, an f16 in and out, and an f16 in, f32 out).
    let halves: Vec<f32> = (0..64).map(|i| (i as f32 - 31.0) * 0.377 + 1.0 / 1024.0).collect();
    let as_f16: Vec<f32> = halves.iter().map(|&v| F16::from_f32(v).to_f32()).collect();
    cases.push(Case {
        input: DType::F16,
        output: DType::F16,
        ..plain(
            "half_arithmetic_f16",
            "const uint64_t i = thread_index(); f16 v = x[i]; f16 w = v * v - (f16)1 + v / (f16)3;\n\
             w += (f16)0.25f; y[i] = i % 2 ? w : -w;",
            halves.clone(),
            as_f16
                .iter()
                .enumerate()
                .flat_map(|(i, &v)| {
                    let w = F16::from_f32(v * v - 1.0 + v / 3.0).to_f32();
                    let w = F16::from_f32(w + 0.25).to_f32();
                    F16::from_f32(if i % 2 == 1 { w } else { -w }).to_bits().to_le_bytes()
                })
                .collect(),
        )
    });
    cases.push(Case {
        input: DType::F16,
        ..plain(
            "half_arithmetic_f16_to_f32",
            "const uint64_t i = thread_index(); y[i] = x[i] * 0.5f + x[i] * 0.25f + 1;",
            halves.clone(),
            f32_bytes(as_f16.iter().map(|&v| v * 0.5 + v * 0.25 + 1.0)),
        )
    });
    // Atomics: 64 threads add into 4 cells and take the maximum into 4 more, in each dtype with
    // atomics; small integers, so that every order of the adds gives the same sum.
    let counts: Vec<f32> = (0..64).map(|i| ((i * 37) % 61) as f32).collect();
    for dtype in [DType::F32, DType::I32, DType::U32, DType::I64, DType::U64] {
        let mut out = [0.0f32; 8];
        for (i, &v) in counts.iter().enumerate() {
            out[i % 4] += v;
            out[4 + i % 4] = out[4 + i % 4].max(v);
        }
        let want = bytes_of(&array_of(Device::cpu().unwrap(), dtype, &out, &[8])).unwrap();
        let name: &'static str = Box::leak(format!("atomics_{}", dtype.name()).into_boxed_str());
        cases.push(Case {
            input: dtype,
            output: dtype,
            output_shape: vec![8],
            init: Some(match dtype {
                DType::F32 => Scalar::F32(0.0),
                DType::I32 => Scalar::I32(0),
                DType::U32 => Scalar::U32(0),
                DType::I64 => Scalar::I64(0),
                _ => Scalar::U64(0),
            }),
            ..plain(
                name,
                "const uint64_t i = thread_index();
                 atomic_add(y, i % 4, x[i]);
atomic_max(y, 4 + i % 4, x[i]);",
                counts.clone(),
                want,
            )
        });
    }
    // f32 minimum, from an initial value above every input.
    let mut lows = [100.0f32; 4];
    for (i, &v) in xs.iter().enumerate() {
        lows[i % 4] = lows[i % 4].min(v);
    }
    cases.push(Case {
        output_shape: vec![4],
        init: Some(Scalar::F32(100.0)),
        ..plain(
            "atomic_min_f32",
            "atomic_min(y, thread_index() % 4, x[thread_index()]);",
            xs.clone(),
            f32_bytes(lows),
        )
    });
    cases.extend(block_cases());
    cases
}

/// A block's values: each thread writes its block index, its index in the block, the block's
/// size and the grid's block count, computed here as a GPU numbers its blocks and threads.
fn block_case(name: &'static str, shape: LaunchShape) -> Case {
    let (blocks, per_block, threads) = match shape {
        LaunchShape::Threads(n) => (n.div_ceil(256), n.min(256), n),
        LaunchShape::Grid { grid, block } => {
            let (b, t) = (grid.iter().product::<u32>() as usize, block.iter().product::<u32>());
            (b, t as usize, b * t as usize)
        }
    };
    let want = (0..threads)
        .flat_map(|i| [i / per_block, i % per_block, per_block, blocks])
        .map(|v| v as f32);
    Case {
        output_shape: vec![4 * threads],
        shape,
        ..plain(
            name,
            "const uint64_t i = thread_index();\n\
             y[4 * i] = (float)block_index(); y[4 * i + 1] = (float)thread_in_block();\n\
             y[4 * i + 2] = (float)block_size(); y[4 * i + 3] = (float)grid_blocks();",
            vec![0.0; threads],
            f32_bytes(want),
        )
    }
}

fn block_cases() -> Vec<Case> {
    let nine: Vec<f32> = (0..9).map(|i| i as f32).collect();
    let thirty: Vec<f32> = (0..30).map(|i| i as f32).collect();
    let sums: Vec<f32> = [0..256, 256..300].map(|r| r.map(|i| (i % 7) as f32).sum()).to_vec();
    vec![
        // 300 threads in blocks of 256: a full block and one of 44.
        block_case("block_of_threads", LaunchShape::Threads(300)),
        block_case("block_of_grid", LaunchShape::Grid { grid: [3, 2, 1], block: [4, 2, 1] }),
        block_case("block_of_3d_grid", LaunchShape::Grid { grid: [2, 1, 2], block: [2, 3, 2] }),
        // MLX's threadgroup puzzle: 3 groups of 4 threads for 9 elements, the index built from
        // threadgroup_position_in_grid * threads_per_threadgroup + thread_position_in_threadgroup.
        Case {
            output_shape: vec![9],
            shape: LaunchShape::Grid { grid: [3, 1, 1], block: [4, 1, 1] },
            ..plain(
                "mlx_threadgroup_map",
                "const uint64_t i = block_index() * block_size() + thread_in_block();\n\
                 if (i < x_size) y[i] = x[i] + 10.0f;",
                nine,
                f32_bytes((0..9).map(|i| i as f32 + 10.0)),
            )
        },
        // CuPy's RawKernel sum, tid = blockDim.x * blockIdx.x + threadIdx.x, launched as (5,), (6,)
        // over 30 elements (x1 and x2 the same array here).
        Case {
            shape: LaunchShape::Grid { grid: [5, 1, 1], block: [6, 1, 1] },
            ..plain(
                "cupy_raw_sum",
                "const uint64_t tid = block_size() * block_index() + thread_in_block();\n\
                 if (tid < x_size) y[tid] = x[tid] + x[tid];",
                thirty,
                f32_bytes((0..30).map(|i| 2.0 * i as f32)),
            )
        },
        // One sum per block by its first thread, over the block's elements: the last block of
        // 300 threads in blocks of 256 holds 44.
        Case {
            output_shape: vec![2],
            shape: LaunchShape::Threads(300),
            ..plain(
                "block_sums",
                "const uint64_t i = thread_index();\n\
                 if (thread_in_block() == 0) { float s = 0.0f;\n\
                   for (uint64_t j = 0; j < block_size() && i + j < x_size; j++) s += x[i + j];\n\
                   y[block_index()] = s; }",
                (0..300).map(|i| (i % 7) as f32).collect(),
                f32_bytes(sums),
            )
        },
    ]
}

fn run(device: Device, case: &Case, bounds_checks: bool) -> Result<Vec<u8>, jitbridge::Error> {
    let init: Vec<(&str, Scalar)> = case.init.iter().map(|&v| ("y", v)).collect();
    let kernel = common::vouched_kernel(&KernelSpec {
        name: case.name,
        inputs: &[("x", case.input)],
        outputs: &[("y", case.output)],
        scalars: case.scalar_names,
        output_inits: &init,
        body: case.body,
        options: CompileOptions { bounds_checks, ..Default::default() },
        ..Default::default()
    })?;
    let x = array_of(device, case.input, &case.values, &case.input_shape);
    let launch = Launch {
        inputs: &[&x],
        scalars: &case.scalars,
        outputs: &mut [Output::New(&case.output_shape)],
        shape: case.shape,
        ..Default::default()
    };
    let out = if bounds_checks {
        kernel.launch_with(launch)?
    } else {
        // SAFETY: every body here indexes only below its arrays' sizes for these launches (the
        // bounds-checked runs of the same bodies would report any access outside).
        unsafe { kernel.launch_with_unchecked(launch)? }
    };
    bytes_of(&out[0])
}

#[test]
fn every_body_computes_its_reference_on_the_cpu() {
    let cpu = Device::cpu().unwrap();
    for case in cases() {
        for checked in [false, true] {
            let got = run(cpu, &case, checked).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            assert_eq!(got, case.want, "{} (bounds checks {checked})", case.name);
        }
    }
}

#[cfg(any(feature = "cuda", feature = "rocm"))]
#[test]
fn every_body_gives_the_same_bytes_on_the_gpu_and_the_cpu() {
    let (cpu, gpu) = (Device::cpu().unwrap(), Device::gpu(0).unwrap());
    for case in cases() {
        for checked in [false, true] {
            let on_cpu = run(cpu, &case, checked).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            let on_gpu = run(gpu, &case, checked).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            assert_eq!(
                on_gpu, on_cpu,
                "{} (bounds checks {checked}): GPU and cpu differ",
                case.name
            );
            assert_eq!(on_gpu, case.want, "{} (bounds checks {checked})", case.name);
        }
    }
}
