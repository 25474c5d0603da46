//! The soak's decode loop: one warm kernel launched step after step on its own stream, each
//! step timed in two parts, the launch (until the launch call returns) and the wait (until the
//! output is done). Through the library (`launch_with_scalars`, then `eval`), as one replay of
//! a graph captured once (`set_scalar` and `launch`, then `eval`), or as the raw control (the
//! backend's launch, event record and event wait of a launch staged once). Outside raw mode each
//! step is followed by one step of the raw control on the same stream, timed apart: the library's
//! rise under the others is judged against the control's in the same run. The decode stream has
//! the priority the soak asks for (by default the device's most urgent).

use super::worker_loops::exact_f32;
use super::{Phase, Tally};
use crate::histogram::Histogram;
use jitbridge::sys_tools::RawLauncher;
use jitbridge::{
    Array, CustomKernel, DType, Device, Graph, GraphArray, GraphLaunch, GraphOutput, KernelSpec,
    Launch, LaunchShape, Output, Scalar, Stream, streams,
};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Instant;

/// Elements of the decode step's input and output.
pub const DECODE_N: usize = 2048;

/// How a decode step launches.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum DecodeMode {
    /// `launch_with_scalars` (lookup, output array, launch, event record, holds), then `eval`.
    Library,
    /// The control: the backend's launch + event record, then the event's wait, of a launch
    /// the library staged once into one fixed output (jb_bench_raw_launcher).
    Raw,
    /// One replay of a graph of the step's launch, captured once on the decode stream: the
    /// scalar set, the replay queued, then `eval` of the graph's output.
    Graph,
}

impl DecodeMode {
    pub fn parse(text: &str) -> Result<DecodeMode, String> {
        match text {
            "library" => Ok(DecodeMode::Library),
            "raw" => Ok(DecodeMode::Raw),
            "graph" => Ok(DecodeMode::Graph),
            other => Err(format!("--decode takes 'library', 'raw' or 'graph', not '{other}'")),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            DecodeMode::Library => "library",
            DecodeMode::Raw => "raw",
            DecodeMode::Graph => "graph",
        }
    }
    /// What the launch and the wait parts of a step are, in this mode.
    pub fn parts(self) -> &'static str {
        match self {
            DecodeMode::Library => "launch = launch_with_scalars, wait = eval",
            DecodeMode::Raw => {
                "launch = backend launch + event record, wait = event synchronize (staged once)"
            }
            DecodeMode::Graph => "launch = set_scalar + graph launch (captured once), wait = eval",
        }
    }
}

/// One phase's step latencies: the whole step, and each part.
pub struct Steps {
    pub total: Histogram,
    pub launch: Histogram,
    pub wait: Histogram,
}

impl Steps {
    fn new() -> Steps {
        Steps { total: Histogram::new(), launch: Histogram::new(), wait: Histogram::new() }
    }
    fn record(&mut self, launch_ns: u64, wait_ns: u64) {
        self.total.record(launch_ns + wait_ns);
        self.launch.record(launch_ns);
        self.wait.record(wait_ns);
    }
}

/// Steps slower than the alone p99, and which part made each slow.
#[derive(Clone, Copy, Default, Debug)]
pub struct Slow {
    /// Steps looked at (measured once the threshold was set).
    pub steps: u64,
    /// Of those, steps whose total was above the threshold.
    pub over: u64,
    /// Of those, the ones whose launch exceeded its alone p50 by more than the wait exceeded
    /// its own, and the others.
    pub launch_dominated: u64,
    pub wait_dominated: u64,
    /// Sums over the slow steps, for their means.
    pub launch_ns: u64,
    pub wait_ns: u64,
}

impl Slow {
    fn record(&mut self, at: &Threshold, launch_ns: u64, wait_ns: u64) {
        self.steps += 1;
        if launch_ns + wait_ns <= at.total_p99_ns {
            return;
        }
        self.over += 1;
        self.launch_ns += launch_ns;
        self.wait_ns += wait_ns;
        if launch_ns.saturating_sub(at.launch_p50_ns) > wait_ns.saturating_sub(at.wait_p50_ns) {
            self.launch_dominated += 1;
        } else {
            self.wait_dominated += 1;
        }
    }
    pub fn mean_launch_ns(&self) -> u64 {
        self.launch_ns / self.over.max(1)
    }
    pub fn mean_wait_ns(&self) -> u64 {
        self.wait_ns / self.over.max(1)
    }
}

/// What a slow step is: above the first alone phase's p99, fixed as the others start (a
/// threshold set at the end would need every step kept, and that memory would read as RSS).
#[derive(Clone, Copy, Debug, Default)]
pub struct Threshold {
    pub total_p99_ns: u64,
    pub launch_p50_ns: u64,
    pub wait_p50_ns: u64,
}

/// What the decode loop measured.
pub struct Decoded {
    pub alone: Steps,
    pub together: Steps,
    /// The raw control's whole steps, interleaved with the mode's (None in raw mode: the mode's
    /// steps are the control's).
    pub control: Option<(Histogram, Histogram)>,
    /// None when the loop never left the first alone phase.
    pub threshold: Option<Threshold>,
    /// Slow steps of the second alone phase (the baseline: about 1% by definition) and of the
    /// phase with the others.
    pub slow_alone: Slow,
    pub slow_together: Slow,
    /// The decode stream's priority, as the device reports it.
    pub priority: i32,
}

impl Decoded {
    /// No step measured (a decode loop that failed to start).
    pub fn empty() -> Decoded {
        Decoded {
            alone: Steps::new(),
            together: Steps::new(),
            control: None,
            threshold: None,
            slow_alone: Slow::default(),
            slow_together: Slow::default(),
            priority: 0,
        }
    }
}

pub fn decode_kernel() -> Result<CustomKernel, jitbridge::Error> {
    // SAFETY: the body computes on one element and subscripts its arrays.
    unsafe {
        CustomKernel::new(&KernelSpec {
            name: "soak_decode",
            inputs: &[("x", DType::F32)],
            outputs: &[("out", DType::F32)],
            scalars: &[("step", DType::F32)],
            body: "const uint64_t i = thread_index(); \
                   if (i < out_size) out[i] = x[i] * 3.0f + step;",
            ..Default::default()
        })
    }
}

fn decode_want(s: f32) -> impl Fn(usize) -> f32 {
    move |i| i as f32 * 3.0 + s
}

/// One decode step: (its outcome, launch ns, wait ns).
type Step = (Result<(), jitbridge::Error>, u64, u64);

/// Decode steps until told to stop, each timed in two parts into its phase's histograms, every
/// output checked exactly (read back outside the timed part, in every mode, so that the loops
/// keep one cadence). Outside raw mode each step is followed by a raw control step.
#[allow(clippy::too_many_arguments)]
pub fn decode_loop(
    device: Device,
    kernel: &CustomKernel,
    mode: DecodeMode,
    priority: i32,
    phase: &AtomicU8,
    ready: &AtomicBool,
    tally: &Tally,
) -> Result<Decoded, jitbridge::Error> {
    let mut stream = Stream::with_priority(device, priority)?;
    let x = Array::arange(device, DECODE_N, DType::F32)?;
    x.eval()?;
    let shape = LaunchShape::Threads(DECODE_N);
    // A graph is captured on a stream no thread has installed; then the decode stream becomes
    // the thread's default, where the library's launches and the raw control's go.
    let mut graph = match mode {
        DecodeMode::Graph => Some(capture_step(kernel, &x, &mut stream, shape)?),
        _ => None,
    };
    let _guard = streams::install_thread_local_default_stream(&stream)?;
    let mut host = vec![0f32; DECODE_N];
    // SAFETY: decode_kernel bounds its index by out_size; x has DECODE_N elements too, and its
    // scalar is an addend, whatever its value.
    let mut raw =
        unsafe { RawLauncher::new(kernel, &[&x], &[Scalar::F32(0.0)], &[&[DECODE_N]], shape)? };
    ready.store(true, Ordering::Release);
    let mut d = Decoded::empty();
    if mode != DecodeMode::Raw {
        d.control = Some((Histogram::new(), Histogram::new()));
    }
    d.priority = stream.priority()?;
    let mut step = 0u32;
    loop {
        let now = Phase::load(phase.load(Ordering::Acquire));
        if now == Phase::Stop {
            break;
        }
        let s = (step % 4096) as f32;
        step = step.wrapping_add(1);
        let (outcome, launch_ns, wait_ns): Step = match (mode, graph.as_mut()) {
            (DecodeMode::Raw, _) => raw_step(&mut raw, s, &mut host),
            (_, Some((graph, out))) => graph_step(graph, *out, &stream, s, &mut host),
            _ => library_step(kernel, &x, s, shape, &mut host),
        };
        let alone_done = d.alone.total.total() > 0;
        if d.threshold.is_none()
            && alone_done
            && matches!(now, Phase::TogetherWarm | Phase::Together)
        {
            d.threshold = Some(Threshold {
                total_p99_ns: d.alone.total.quantile(0.99),
                launch_p50_ns: d.alone.launch.quantile(0.5),
                wait_p50_ns: d.alone.wait.quantile(0.5),
            });
        }
        let measured = match now {
            Phase::Alone => Some((&mut d.alone, &mut d.slow_alone)),
            Phase::Together => Some((&mut d.together, &mut d.slow_together)),
            _ => None,
        };
        if let Some((steps, slow)) = measured {
            steps.record(launch_ns, wait_ns);
            if let Some(at) = &d.threshold {
                slow.record(at, launch_ns, wait_ns);
            }
        }
        check_step(tally, outcome, &host, s, mode_label(mode));
        if let Some((alone, together)) = d.control.as_mut() {
            let (outcome, launch_ns, wait_ns) = raw_step(&mut raw, s, &mut host);
            match now {
                Phase::Alone => alone.record(launch_ns + wait_ns),
                Phase::Together => together.record(launch_ns + wait_ns),
                _ => {}
            }
            check_step(tally, outcome, &host, s, "decode (raw control)");
        }
    }
    Ok(d)
}

/// Counts a step's output, read into `host`, as exact or not, or its error.
fn check_step(
    tally: &Tally,
    outcome: Result<(), jitbridge::Error>,
    host: &[f32],
    s: f32,
    what: &str,
) {
    match outcome {
        Ok(()) => tally.check(exact_f32(host, decode_want(s)), what),
        Err(e) => tally.error(what, &e),
    }
}

/// A step of the raw control; the output is read into `host` after the timed part.
fn raw_step(raw: &mut RawLauncher<'_>, s: f32, host: &mut [f32]) -> Step {
    // SAFETY: as for the launcher: the scalar is an addend.
    let (result, launch_ns, wait_ns) = unsafe { raw.step(&[Scalar::F32(s)]) };
    (result.and_then(|()| raw.read_f32(0, host)), launch_ns, wait_ns)
}

fn mode_label(mode: DecodeMode) -> &'static str {
    match mode {
        DecodeMode::Library => "decode",
        DecodeMode::Raw => "decode (raw)",
        DecodeMode::Graph => "decode (graph)",
    }
}

/// The step's one launch captured on `stream` as a graph: the graph and its output.
fn capture_step<'x>(
    kernel: &CustomKernel,
    x: &'x Array,
    stream: &mut Stream,
    shape: LaunchShape,
) -> Result<(Graph<'x>, GraphArray), jitbridge::Error> {
    let mut capture = stream.begin_capture()?;
    let launch = GraphLaunch {
        inputs: vec![x.into()],
        scalars: vec![Scalar::F32(0.0)],
        outputs: vec![GraphOutput::New(vec![DECODE_N])],
        shape,
    };
    // SAFETY: decode_kernel bounds its index by out_size; x has DECODE_N elements too, and its
    // scalar is an addend, whatever its value at a replay.
    let out = unsafe { capture.launch_unchecked(kernel, launch) }?[0];
    Ok((capture.end()?, out))
}

/// A step as one replay: the scalar set and the replay queued, then the output's `eval`; the
/// output is read into `host` after the timed part.
fn graph_step(
    graph: &mut Graph<'_>,
    out: GraphArray,
    stream: &Stream,
    s: f32,
    host: &mut [f32],
) -> Step {
    let start = Instant::now();
    // SAFETY: as in capture_step.
    let launched =
        graph.set_scalar(0, 0, s).and_then(|()| unsafe { graph.launch_unchecked(stream) });
    let mid = Instant::now();
    let waited = launched.and_then(|()| graph.array(out).eval());
    let end = Instant::now();
    let (launch_ns, wait_ns) = ((mid - start).as_nanos() as u64, (end - mid).as_nanos() as u64);
    let outcome =
        waited.and_then(|()| graph.array(out).to_vec::<f32>()).map(|v| host.copy_from_slice(&v));
    (outcome, launch_ns, wait_ns)
}

/// A step through the library: the launch call, then `eval`; the output is read into `host`
/// after the timed part.
fn library_step(
    kernel: &CustomKernel,
    x: &Array,
    s: f32,
    shape: LaunchShape,
    host: &mut [f32],
) -> Step {
    let start = Instant::now();
    let mut outputs = [Output::New(&[DECODE_N])];
    let launch = Launch {
        inputs: &[x],
        scalars: &[Scalar::F32(s)],
        outputs: &mut outputs,
        shape,
        ..Default::default()
    };
    // SAFETY: decode_kernel bounds its index by out_size; x has DECODE_N elements too.
    let launched = unsafe { kernel.launch_with_unchecked(launch) };
    let mid = Instant::now();
    let out = launched.and_then(|mut out| {
        let out = out.remove(0);
        out.eval()?;
        Ok(out)
    });
    let end = Instant::now();
    let (launch_ns, wait_ns) = ((mid - start).as_nanos() as u64, (end - mid).as_nanos() as u64);
    let outcome = out.and_then(|out| out.to_vec::<f32>()).map(|v| host.copy_from_slice(&v));
    (outcome, launch_ns, wait_ns)
}

#[cfg(test)]
mod tests {
    use super::DecodeMode;

    #[test]
    fn decode_mode_parse() {
        assert_eq!(DecodeMode::parse("raw"), Ok(DecodeMode::Raw));
        assert_eq!(DecodeMode::parse("library"), Ok(DecodeMode::Library));
        assert_eq!(DecodeMode::parse("graph"), Ok(DecodeMode::Graph));
        for bad in ["", "Raw", "lib", "raw,library", "graphs"] {
            let message = DecodeMode::parse(bad).expect_err(bad);
            assert!(message.contains("'library', 'raw' or 'graph'"), "{message}");
        }
    }
}
