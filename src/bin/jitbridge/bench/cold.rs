//! Section 5 of the bench: a cold first launch against the bare compiler on a source of the same
//! shape, then other first launches timed step by step inside the library.

use super::{Context, fresh_variant, median};
use crate::rows::{H200, Row, Target, Unit};
use jitbridge::{
    Array, Counters, CustomKernel, DType, KernelSpec, jit_race_probe_array, race, sys_tools,
};
use std::time::Instant;

/// NVRTC keeps what it compiled in the driver's compute cache (~/.nv/ComputeCache), keyed by
/// source and program name: a source compiled before, by this process or an earlier one,
/// compiles in about a third of the time. So the baseline compiles another never-built variant
/// (never the first launch's own source), the variants are new to this host (seed_variants), and
/// which of the two runs first alternates, so neither side gets the warmer compiler.
pub fn cold_first_launch(
    context: &mut Context<'_>,
    rows: &mut Vec<Row>,
) -> Result<(), jitbridge::Error> {
    let (device, samples) = (context.device, context.scale.cold_samples);
    let input = Array::arange(device, race::PROBE_ELEMENTS, DType::F32)?;
    let mut first = Vec::new();
    let mut build = Vec::new();
    let mut compile = Vec::new();
    for sample in 0..samples {
        let (variant, other) = (fresh_variant(), fresh_variant());
        let name = format!("mlxcel_jit_race_probe_v{other}");
        // SAFETY: the library's probe body, which computes on one element and subscripts its
        // arrays.
        let fresh_source = unsafe {
            CustomKernel::new(&KernelSpec {
                name: &name,
                inputs: &[("inp", DType::F32)],
                outputs: &[("out", DType::F32)],
                body: sys_tools::probe_body(),
                ..Default::default()
            })?
        };
        if sample % 2 == 1 {
            compile.push(sys_tools::compile_only(&fresh_source, device)?);
        }
        let before = Counters::read();
        let start = Instant::now();
        jit_race_probe_array(&input, variant)?.eval()?;
        first.push(start.elapsed().as_nanos() as f64);
        build.push(Counters::read().since(&before).build_ns as f64);
        if sample % 2 == 0 {
            compile.push(sys_tools::compile_only(&fresh_source, device)?);
        }
    }
    let compile = median(compile);
    let section = "cold first launch";
    let first_launch =
        format!("first launch, median of {samples} (timed by the caller) vs the compiler alone");
    rows.push(Row::new(section, first_launch, median(first), Unit::Ns).against(compile).target(
        Target { max_value: None, max_ratio: Some(1.05), text: "<= 1.05x", set_for: H200 },
    ));
    rows.push(
        Row::new(section, "of which the build (compile + module load)", median(build), Unit::Ns)
            .against(compile),
    );
    // Other first launches (new variants), each step timed inside the library: their sum is
    // near the caller's time above, not equal to it (other samples, another clock's reach).
    let steps: Vec<sys_tools::ColdSteps> = (0..samples)
        .map(|_| sys_tools::cold_probe_steps(&input, fresh_variant()))
        .collect::<Result<_, _>>()?;
    type Step = fn(&sys_tools::ColdSteps) -> f64;
    let step_rows: [(&str, Step); 10] = [
        ("as a whole", |s| s.total_ns),
        ("staging (lookup, build, outputs)", |s| s.stage_ns),
        ("compile", |s| s.compile_ns),
        ("module load", |s| s.load_ns),
        ("get function", |s| s.get_function_ns),
        ("configure", |s| s.configure_ns),
        ("disk-cache store (probes skip it)", |s| s.disk_store_ns),
        ("first launch call", |s| s.launch_ns),
        ("holds (the event is recorded lazily)", |s| s.record_ns),
        ("wait for the kernel", |s| s.sync_ns),
    ];
    for (step, of) in step_rows {
        let measure = match step {
            "as a whole" => format!(
                "step: as a whole (median of {samples} other first launches, timed inside the library)"
            ),
            _ => format!("step: {step}"),
        };
        rows.push(Row::new(section, measure, median(steps.iter().map(of).collect()), Unit::Ns));
    }
    // The compiler again on a source it just compiled: NVRTC answers from its compute cache, a
    // C compiler has none.
    let again = if device.backend() == "cuda" {
        "same source compiled again (NVRTC: a compute-cache hit)"
    } else {
        "same source compiled again"
    };
    let again_ns = median(steps.iter().map(|s| s.compile_again_ns).collect());
    rows.push(Row::new(section, again, again_ns, Unit::Ns).against(compile));
    Ok(())
}
