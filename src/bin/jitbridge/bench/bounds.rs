//! Section 8 of the bench: what bounds checks cost. One body made twice, bounds-checked and not,
//! launched and waited for on 256 elements (the per-launch cost: the record, its fill and its
//! read at the wait) and on 1 Mi (the per-access cost), the two kinds alternating in blocks.

use super::{Context, fresh_variant};
use crate::rows::{Row, Unit};
use jitbridge::{Array, CompileOptions, CustomKernel, DType, KernelSpec, LaunchShape};
use std::time::Instant;

/// The checked and unchecked loops alternate in this many blocks each.
const BLOCKS: usize = 10;

fn kernel(bounds_checks: bool, variant: i32) -> Result<CustomKernel, jitbridge::Error> {
    let body = format!(
        "const uint64_t i = thread_index(); if (i < y_size) y[i] = x[i] * 2.0f + 1.0f; \
         /* bench variant {variant} */"
    );
    // SAFETY: the body computes on one element and subscripts its arrays.
    unsafe {
        CustomKernel::new(&KernelSpec {
            name: "bench_bounds",
            inputs: &[("x", DType::F32)],
            outputs: &[("y", DType::F32)],
            body: &body,
            options: CompileOptions { bounds_checks, ..Default::default() },
            ..Default::default()
        })
    }
}

/// Nanoseconds per launch and wait of `kernel` over all of `x`.
fn per_launch(kernel: &CustomKernel, x: &Array, launches: usize) -> Result<f64, jitbridge::Error> {
    let n = x.size();
    let start = Instant::now();
    for _ in 0..launches {
        // SAFETY: the body bounds its index by y_size, and x has as many elements as y.
        let y = unsafe { kernel.launch_unchecked(&[x], &[&[n]], LaunchShape::Threads(n))? };
        y[0].eval()?;
    }
    Ok(start.elapsed().as_nanos() as f64 / launches as f64)
}

pub fn bounds_check_cost(
    context: &mut Context<'_>,
    rows: &mut Vec<Row>,
) -> Result<(), jitbridge::Error> {
    let device = context.device;
    let variant = fresh_variant();
    let (checked, unchecked) = (kernel(true, variant)?, kernel(false, variant)?);
    let small_launches = (context.scale.probe_launches as usize / 10).max(BLOCKS);
    let large_launches = if context.scale.quick { BLOCKS } else { 5 * BLOCKS };
    let section = "bounds checks";
    for (elements, launches, what) in [
        (256, small_launches, "256 elements, launch + wait, checked vs unchecked"),
        (1 << 20, large_launches, "1 Mi elements, launch + wait, checked vs unchecked"),
    ] {
        let x = Array::arange(device, elements, DType::F32)?;
        // Built, and the pools filled, before anything is timed.
        per_launch(&checked, &x, 2)?;
        per_launch(&unchecked, &x, 2)?;
        let block = launches / BLOCKS;
        let (mut checked_sum, mut unchecked_sum) = (0.0, 0.0);
        for _ in 0..BLOCKS {
            unchecked_sum += per_launch(&unchecked, &x, block)?;
            checked_sum += per_launch(&checked, &x, block)?;
        }
        let blocks = BLOCKS as f64;
        rows.push(
            Row::new(section, what, checked_sum / blocks, Unit::Ns).against(unchecked_sum / blocks),
        );
    }
    Ok(())
}
