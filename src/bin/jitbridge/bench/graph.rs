//! Section 10 of the bench, "captured graph": a decode step of four kernels replayed as one
//! captured graph, against the same four launches and against one launch: host time per step
//! (the calls that queue the work; its wait is outside the timed part).

use super::Context;
use crate::rows::{H200, Row, Target, Unit};
use jitbridge::{
    Array, CustomKernel, DType, GraphInput, GraphLaunch, GraphOutput, KernelSpec, Launch,
    LaunchShape, Output, Scalar, Stream,
};
use std::time::Instant;

/// Elements of each kernel's input and output (the soak's decode step's size).
const N: usize = 2048;
/// The three ways alternate in this many blocks each, so host drift falls on all alike.
const BLOCKS: usize = 10;
/// The other kernels' scalar; the first kernel's is the step's.
const FIXED: f32 = 1.0;

/// The step's kernels: each reads the one before's output (the first reads the input).
fn step_kernels() -> Result<Vec<CustomKernel>, jitbridge::Error> {
    let bodies = [
        ("bench_graph_scale", "out[i] = x[i] * 0.5f + s;"),
        ("bench_graph_add", "out[i] = x[i] + s;"),
        ("bench_graph_mul", "out[i] = x[i] * s;"),
        ("bench_graph_sub", "out[i] = x[i] - s;"),
    ];
    bodies
        .iter()
        .map(|(name, body)| {
            // SAFETY: each body adds, multiplies or subtracts one element and subscripts its
            // arrays.
            unsafe {
                CustomKernel::new(&KernelSpec {
                    name,
                    inputs: &[("x", DType::F32)],
                    outputs: &[("out", DType::F32)],
                    scalars: &[("s", DType::F32)],
                    body: &format!(
                        "const uint64_t i = thread_index(); if (i < out_size) {{ {body} }}"
                    ),
                    ..Default::default()
                })
            }
        })
        .collect()
}

/// `kernels` launched one after another on `stream` from `x`, the first with scalar `s`: the
/// last output.
fn launch_step(
    kernels: &[CustomKernel],
    x: &Array,
    s: f32,
    stream: &Stream,
) -> Result<Array, jitbridge::Error> {
    let mut last: Option<Array> = None;
    for (k, kernel) in kernels.iter().enumerate() {
        let input = last.as_ref().unwrap_or(x);
        let mut outputs = [Output::New(&[N])];
        let launch = Launch {
            inputs: &[input],
            scalars: &[Scalar::F32(if k == 0 { s } else { FIXED })],
            outputs: &mut outputs,
            shape: LaunchShape::Threads(N),
            stream: Some(stream),
            ..Default::default()
        };
        // SAFETY: each body bounds its index by out_size, and every array has N elements.
        let out = unsafe { kernel.launch_with_unchecked(launch) }?.remove(0);
        last = Some(out);
    }
    last.ok_or_else(|| jitbridge::Error::new_other("a step of no kernels"))
}

pub fn graph_replay(
    context: &mut Context<'_>,
    rows: &mut Vec<Row>,
) -> Result<(), jitbridge::Error> {
    let device = context.device;
    let steps = (context.scale.probe_launches as usize / BLOCKS).max(1);
    let kernels = step_kernels()?;
    let x = Array::arange(device, N, DType::F32)?;
    let mut stream = Stream::new(device)?;
    let mut capture = stream.begin_capture()?;
    let mut input: GraphInput<'_> = (&x).into();
    let mut last = None;
    for (k, kernel) in kernels.iter().enumerate() {
        let launch = GraphLaunch {
            inputs: vec![input],
            scalars: vec![Scalar::F32(if k == 0 { 0.0 } else { FIXED })],
            outputs: vec![GraphOutput::New(vec![N])],
            shape: LaunchShape::Threads(N),
        };
        // SAFETY: as in launch_step, at every replay whatever the scalars.
        let out = unsafe { capture.launch_unchecked(kernel, launch) }?[0];
        input = out.into();
        last = Some(out);
    }
    let mut graph = capture.end()?;
    let graph_out = last.ok_or_else(|| jitbridge::Error::new_other("a step of no kernels"))?;

    // Host ns per step of each way, over one block; the block's work is waited for untimed.
    let four = |s0: f32| -> Result<f64, jitbridge::Error> {
        let start = Instant::now();
        let mut out = None;
        for i in 0..steps {
            out = Some(launch_step(&kernels, &x, s0 + i as f32, &stream)?);
        }
        let ns = start.elapsed().as_nanos() as f64 / steps as f64;
        out.map(|o| o.eval()).transpose()?;
        Ok(ns)
    };
    let one_launch = |s0: f32| -> Result<f64, jitbridge::Error> {
        let start = Instant::now();
        let mut out = None;
        for i in 0..steps {
            out = Some(launch_step(&kernels[..1], &x, s0 + i as f32, &stream)?);
        }
        let ns = start.elapsed().as_nanos() as f64 / steps as f64;
        out.map(|o| o.eval()).transpose()?;
        Ok(ns)
    };
    let (mut four_sum, mut one_sum, mut graph_sum) = (0.0, 0.0, 0.0);
    for block in 0..=BLOCKS {
        let s0 = (block * steps) as f32;
        let start = Instant::now();
        for i in 0..steps {
            graph.set_scalar(0, 0, s0 + i as f32)?;
            // SAFETY: as in launch_step.
            unsafe { graph.launch_unchecked(&stream) }?;
        }
        let graph_ns = start.elapsed().as_nanos() as f64 / steps as f64;
        graph.array(graph_out).eval()?;
        let (four_ns, one_ns) = (four(s0)?, one_launch(s0)?);
        if block > 0 {
            // Block 0 warms the buffer cache and event pool up to the depth each keeps in flight.
            graph_sum += graph_ns;
            four_sum += four_ns;
            one_sum += one_ns;
        }
    }
    // The replays ran the step exactly: the last replay's output is the launches' for its s.
    let s_last = (BLOCKS * steps + steps - 1) as f32;
    let want = launch_step(&kernels, &x, s_last, &stream)?.to_vec::<f32>()?;
    if graph.array(graph_out).to_vec::<f32>()? != want {
        return Err(jitbridge::Error::new_other(
            "the graph's last replay differs from the same four launches",
        ));
    }
    let blocks = BLOCKS as f64;
    let (graph_ns, four_ns, one_ns) = (graph_sum / blocks, four_sum / blocks, one_sum / blocks);
    let section = "captured graph";
    rows.push(
        Row::new(
            section,
            "4-kernel step, one graph replay (+ a scalar) vs one launch",
            graph_ns,
            Unit::Ns,
        )
        .against(one_ns)
        .target(Target {
            max_value: None,
            max_ratio: Some(1.3),
            text: "<= 1.3x one launch",
            set_for: H200,
        }),
    );
    rows.push(
        Row::new(section, "4-kernel step, four launches vs one launch", four_ns, Unit::Ns)
            .against(one_ns),
    );
    Ok(())
}
