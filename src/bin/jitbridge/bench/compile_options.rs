//! Section 11 of the bench: what a cold compile of the library's own generated source costs with
//! each compiler option set, against the plain one, in one run. NVRTC (when this build has the
//! cuda backend, with or without a GPU; NVRTC not found fails the section): `--gpu-architecture=sm_XY` alone (the library's options
//! before -minimal), with `-minimal`, with `--pch`, with both, PTX for `compute_XY` (with a cuda
//! device, also loaded: the driver's JIT), and the library's own options; and whether the cubins
//! are the same code as the plain option's. The cpu compiler: -O2 -fPIC -shared -w (its flags
//! before -pipe), with -pipe, at -O1 and -O3, and its own flags.
//! Every compile is of a source never compiled before, distinct in code (NVRTC's cache keeps
//! sources that differ only in a comment). Each set runs its compiles in a block after one
//! untimed compile, as a process whose builds all use one option set does (--pch makes its
//! precompiled header at the first, and another set's compile in between would replace it);
//! the sets take two turns, the second in reverse order, so that a drift in the host's load
//! falls on all alike.

use super::{Context, fresh_variant, median};
use crate::rows::{H200_CUDA, Row, Target, Unit};
use jitbridge::sys_tools::{CompileCost, CompileOptions, compile_with};
use jitbridge::{CustomKernel, DType, KernelSpec};

/// The target for the per-kernel cold compile on the H200: at least 20% cheaper.
const MAX_OWN_RATIO: f64 = 0.8;

/// A kernel of the soak's decode shape whose compiled code differs by `salt`, an integer operand:
/// as a float constant (`{salt}.0f`), salts within a rounding step (64 or 128 at the bench's
/// salts, 9e8 to 1.9e9) compiled to one PTX, which the driver's JIT then found in its own cache.
fn salted(salt: i32) -> Result<CustomKernel, jitbridge::Error> {
    let body = format!(
        "const uint64_t i = thread_index(); if (i < out_size) out[i] = x[i] * 3.0f + step + \
         (float)((unsigned)i ^ {salt}u);"
    );
    // SAFETY: the body computes on one element and subscripts its arrays (and the section only
    // compiles and loads it: a cubin, a .so without constructors).
    unsafe {
        CustomKernel::new(&KernelSpec {
            name: "bench_compile_options",
            inputs: &[("x", DType::F32)],
            outputs: &[("out", DType::F32)],
            scalars: &[("step", DType::F32)],
            body: &body,
            ..Default::default()
        })
    }
}

/// One option set: its label in the rows and what the compiler gets.
struct OptionSet {
    label: String,
    options: Option<Vec<String>>,
    /// Whether its code is a cubin to compare with the plain option's (not PTX).
    cubin: bool,
}

impl OptionSet {
    fn these(label: &str, options: &[&str], cubin: bool) -> OptionSet {
        let options = Some(options.iter().map(|o| o.to_string()).collect());
        OptionSet { label: label.to_string(), options, cubin }
    }
    fn compile(
        &self,
        backend: &str,
        arch: &str,
        load_on: Option<jitbridge::Device>,
    ) -> Result<CompileCost, jitbridge::Error> {
        let list: Vec<&str> = self.options.iter().flatten().map(String::as_str).collect();
        let options = match &self.options {
            Some(_) => CompileOptions::These(&list),
            None => CompileOptions::Own { arch: (!arch.is_empty()).then_some(arch) },
        };
        compile_with(&salted(fresh_variant())?, backend, options, load_on)
    }
}

/// Median compile (and load) nanoseconds of each set, about `samples` each: two turns over the
/// sets, the second in reverse, each set a block of compiles after an untimed one.
fn measure(
    sets: &[OptionSet],
    backend: &str,
    arch: &str,
    load_on: Option<jitbridge::Device>,
    samples: usize,
) -> Result<Vec<(f64, f64)>, jitbridge::Error> {
    let mut costs = vec![(Vec::new(), Vec::new()); sets.len()];
    let per_turn = samples.div_ceil(2);
    for turn in 0..2 {
        let order: Vec<usize> = match turn {
            0 => (0..sets.len()).collect(),
            _ => (0..sets.len()).rev().collect(),
        };
        for i in order {
            let (set, (compile, load)) = (&sets[i], &mut costs[i]);
            set.compile(backend, arch, load_on)?;
            for _ in 0..per_turn {
                let cost = set.compile(backend, arch, load_on)?;
                compile.push(cost.compile_ns);
                load.push(cost.load_ns);
            }
        }
    }
    Ok(costs.into_iter().map(|(compile, load)| (median(compile), median(load))).collect())
}

pub fn compile_options(
    context: &mut Context<'_>,
    rows: &mut Vec<Row>,
) -> Result<(), jitbridge::Error> {
    let samples = context.scale.compile_samples;
    nvrtc_rows(context, rows, samples)?;
    cpu_rows(rows, samples)
}

fn nvrtc_rows(
    context: &Context<'_>,
    rows: &mut Vec<Row>,
    samples: usize,
) -> Result<(), jitbridge::Error> {
    let device = context.device;
    let on_cuda = device.backend() == "cuda";
    // Without a cuda device NVRTC still runs: for the H200's architecture.
    let arch = if on_cuda { device.arch() } else { "sm_90".to_string() };
    let virtual_arch = arch.replacen("sm_", "compute_", 1);
    let plain = format!("--gpu-architecture={arch}");
    let ptx = format!("--gpu-architecture={virtual_arch}");
    let sets = [
        OptionSet::these(&plain, &[&plain], true),
        OptionSet::these(&format!("{plain} -minimal"), &[&plain, "-minimal"], true),
        OptionSet::these(&format!("{plain} --pch"), &[&plain, "--pch"], true),
        OptionSet::these(&format!("{plain} -minimal --pch"), &[&plain, "-minimal", "--pch"], true),
        OptionSet::these(&format!("{ptx} (PTX)"), &[&ptx], false),
        OptionSet::these(&format!("{ptx} -minimal (PTX)"), &[&ptx, "-minimal"], false),
        OptionSet { label: "the library's own options".into(), options: None, cubin: true },
    ];
    let load_on = on_cuda.then_some(device);
    if !cfg!(feature = "cuda") {
        return Ok(()); // No NVRTC in this build: the cpu compiler's rows only.
    }
    let costs = measure(&sets, "cuda", &arch, load_on, samples)?;
    let section = "compile options";
    let (plain_compile, plain_load) = costs[0];
    let per = format!("median of {}, each source new", 2 * samples.div_ceil(2));
    for (i, (set, &(compile, load))) in sets.iter().zip(&costs).enumerate() {
        let measure = format!("NVRTC {}, per compile ({per})", set.label);
        let row = Row::new(section, measure, compile, Unit::Ns).against(plain_compile);
        rows.push(match set.options {
            None => row.target(Target {
                max_value: None,
                max_ratio: Some(MAX_OWN_RATIO),
                text: "<= 0.8x",
                set_for: H200_CUDA,
            }),
            Some(_) => row,
        });
        if on_cuda && i > 0 && !set.cubin {
            let measure = format!("NVRTC {} + the driver's JIT at load, vs the cubin's", set.label);
            rows.push(
                Row::new(section, measure, compile + load, Unit::Ns)
                    .against(plain_compile + plain_load),
            );
        }
    }
    // The same code: each cubin set against the plain option, on one new source each.
    for set in sets.iter().skip(1).filter(|s| s.cubin) {
        let mut differing = 0;
        for _ in 0..samples.min(4) {
            let kernel = salted(fresh_variant())?;
            let plain_code = compile_with(&kernel, "cuda", CompileOptions::These(&[&plain]), None)?;
            let list: Vec<&str> = set.options.iter().flatten().map(String::as_str).collect();
            let options = match &set.options {
                Some(_) => CompileOptions::These(&list),
                None => CompileOptions::Own { arch: Some(&arch) },
            };
            let code = compile_with(&kernel, "cuda", options, None)?;
            differing += u64::from(code.code_sha256 != plain_code.code_sha256);
        }
        let measure = format!(
            "NVRTC {}: cubins not the same as {plain}'s (of {})",
            set.label,
            samples.min(4)
        );
        rows.push(Row::new(section, measure, differing as f64, Unit::Count));
    }
    Ok(())
}

fn cpu_rows(rows: &mut Vec<Row>, samples: usize) -> Result<(), jitbridge::Error> {
    // The library's flags before -pipe, with -pipe, at two other -O levels, and its own.
    let plain = ["-O2", "-fPIC", "-shared", "-w"];
    let with = |extra: &'static str| [&plain[..], &[extra]].concat();
    let level = |o: &'static str| [&[o], &plain[1..]].concat();
    let sets = [
        OptionSet::these(&plain.join(" "), &plain, false),
        OptionSet::these(&with("-pipe").join(" "), &with("-pipe"), false),
        OptionSet::these(&level("-O1").join(" "), &level("-O1"), false),
        OptionSet::these(&level("-O3").join(" "), &level("-O3"), false),
        OptionSet { label: "its own flags".into(), options: None, cubin: false },
    ];
    let costs = measure(&sets, "cpu", "", None, samples)?;
    let plain_compile = costs[0].0;
    for (set, &(compile, _)) in sets.iter().zip(&costs) {
        let measure = format!(
            "cpu compiler, {}, per compile (median of {}, each source new)",
            set.label,
            2 * samples.div_ceil(2)
        );
        rows.push(Row::new("compile options", measure, compile, Unit::Ns).against(plain_compile));
    }
    Ok(())
}

#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::salted;
    use jitbridge::sys_tools::{CompileOptions, compile_with};

    /// Salts next to each other near the bench's (about 1e9) make different PTX: each PTX load
    /// then runs the driver's JIT rather than finding the code in the driver's cache.
    #[test]
    fn neighbouring_salts_make_different_ptx() {
        let ptx = CompileOptions::These(&["--gpu-architecture=compute_90", "-minimal"]);
        let code = |salt| compile_with(&salted(salt).unwrap(), "cuda", ptx, None).unwrap();
        let (a, b) = (code(1_000_000_001), code(1_000_000_002));
        assert!(a.code_bytes > 0);
        assert_ne!(a.code_sha256, b.code_sha256, "two salts compiled to the same PTX");
    }
}
