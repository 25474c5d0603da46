//! `jitbridge bench`: the launch path's costs, each against its baseline, measured in one run.

mod measures;
pub mod new_process;
mod rows;

use crate::Outcome;
use crate::args::{
    Command, DEVICE_OPT, Opt, device_or_default, no_positional, parse_args, print_help,
};
use jitbridge::{
    Array, CustomKernel, DType, Device, KernelSpec, Stream, jit_race_probe_array, race,
    set_lookaside_enabled, streams, sys_tools,
};
use measures::{
    HitLoop, hit_latency_under_builds, lookup_ns, new_thread_first_launch, warm_kernels,
};
use rows::{H200, H200_CUDA, Row, Target, histogram_rows};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Instant;

pub const BENCH: Command = Command {
    name: "bench",
    usage: "jitbridge bench [--json] [--quick] [--device cpu|gpu|cuda|rocm[:N]]",
    about: "measure the launch path's costs, each against its baseline",
    details: "Measures, in one run: hit lookups (lookaside vs the plain locked protocol) at 1-16
threads, hit latency while other threads build, the probe launch path vs a raw launch, a cold
first launch vs the compiler alone, and a new process's first launch with and without a disk
cache entry. Each row with a target says whether this run met it, and which hardware the target
was set for (the H200 host); on other hardware the row is judged against it all the same.

options:
  --json        one JSON object on stdout instead of the table: per row section, measure,
                value, unit, baseline, ratio (numbers, or null), target (null, or text,
                max_value, max_ratio and hardware) and met (true, false, or null without a target)
  --quick       every measure once and small, in seconds: shows the bench works; its numbers
                are not comparable
  --device D    cpu, gpu, cuda or rocm, with an optional :N (default: as for run)",
};

pub fn bench_command(args: &[String]) -> Outcome {
    let opts =
        [Opt { flag: "--json", value: None }, Opt { flag: "--quick", value: None }, DEVICE_OPT];
    let Some(args) = parse_args(&BENCH, args, &opts)? else {
        print_help(&BENCH);
        return Ok(true);
    };
    no_positional(&BENCH, &args)?;
    let device = device_or_default(args.get("--device"))?;
    let scale = if args.has("--quick") { &Scale::QUICK } else { &Scale::FULL };
    let rows = run(device, scale)?;
    if args.has("--json") {
        rows::print_json(device, scale, &rows);
    } else {
        rows::print_table(device, scale, &rows);
    }
    Ok(true)
}

/// Section 3's raw and full loops alternate in this many blocks each.
const PROBE_BLOCKS: i32 = 10;
/// Probe variants the bench builds come from here up, clear of the run scenario's.
static NEXT_VARIANT: AtomicI32 = AtomicI32::new(900_000_000);

/// How much work each measure does.
pub struct Scale {
    pub lookups_per_thread: usize,
    pub probe_launches: i32,
    pub cold_samples: usize,
    pub builds_each: usize,
    pub new_process_rounds: usize,
    pub new_threads: usize,
    pub soak_seconds: f64,
    pub quick: bool,
}

impl Scale {
    /// The full run, whose numbers the targets are about.
    pub const FULL: Scale = Scale {
        lookups_per_thread: 200_000,
        probe_launches: 20_000,
        cold_samples: 5,
        builds_each: 4,
        new_process_rounds: 3,
        new_threads: 200,
        soak_seconds: 20.0,
        quick: false,
    };
    /// Every measure once and small (seconds): checks the bench works, its numbers are noise.
    pub const QUICK: Scale = Scale {
        lookups_per_thread: 2_000,
        probe_launches: 100,
        cold_samples: 1,
        builds_each: 1,
        new_process_rounds: 1,
        new_threads: 4,
        soak_seconds: 2.0,
        quick: true,
    };
}

/// Starts the bench's variants at a place no earlier run on this host used, so no source the
/// bench compiles is in NVRTC's compute cache (a rerun would otherwise compile from it).
fn seed_variants() {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mixed =
        (nanos ^ u64::from(std::process::id()).rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // Up to 1.9e9, leaving 2.4e8 variants before i32::MAX.
    NEXT_VARIANT.store(900_000_000 + (mixed >> 34) as i32 % 1_000_000_000, Ordering::Relaxed);
}

fn fresh_variant() -> i32 {
    NEXT_VARIANT.fetch_add(1, Ordering::Relaxed)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

pub fn run(device: Device, scale: &Scale) -> Result<Vec<Row>, jitbridge::Error> {
    seed_variants();
    let mut rows = Vec::new();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut thread_counts = vec![1, 2, 4, 8, 16];
    if !thread_counts.contains(&cores) {
        thread_counts.push(cores);
        thread_counts.sort_unstable();
    }

    // 1. Hit lookups: lookaside against the plain read-lock protocol.
    note!("bench: hit lookups");
    let kernels = warm_kernels(device, "lookup")?;
    for &threads in &thread_counts {
        set_lookaside_enabled(false);
        let plain = lookup_ns(device, &kernels, threads, scale.lookups_per_thread)?;
        set_lookaside_enabled(true);
        let lookaside = lookup_ns(device, &kernels, threads, scale.lookups_per_thread)?;
        rows.push(Row {
            section: "1 hit lookup",
            name: format!("{threads} threads"),
            value: lookaside,
            unit: "ns",
            baseline: Some(plain),
            target: (threads == 16).then_some(Target {
                max_value: Some(30.0),
                max_ratio: Some(1.0 / 20.0),
                text: "<= 30 ns, >= 20x faster",
                hardware: H200,
            }),
        });
    }

    // 2. Warm hits while other threads build new keys.
    note!("bench: hit latency during builds");
    let mut histograms = Vec::new();
    for (enabled, what) in [(false, HitLoop::Hit), (true, HitLoop::Hit), (true, HitLoop::NoCall)] {
        set_lookaside_enabled(enabled);
        let histogram = hit_latency_under_builds(device, &kernels, what, 2, 2, scale.builds_each)?;
        let (max, p99, samples) = (histogram.max, histogram.quantile(0.99), histogram.total());
        let mode = match (enabled, what) {
            (_, HitLoop::NoCall) => "control, no jitbridge call",
            (true, _) => "lookaside",
            (false, _) => "plain protocol",
        };
        if enabled {
            histograms.push((mode, histogram));
        }
        rows.push(Row {
            section: "2 hit during builds",
            name: format!("max, {mode} ({samples} hits)"),
            value: max as f64,
            unit: "ns",
            baseline: None,
            target: (enabled && what == HitLoop::Hit).then_some(Target {
                max_value: Some(50_000.0),
                max_ratio: None,
                text: "max <= 50 us",
                hardware: H200,
            }),
        });
        rows.push(Row {
            section: "2 hit during builds",
            name: format!("p99, {mode}"),
            value: p99 as f64,
            unit: "ns",
            baseline: None,
            target: None,
        });
    }
    for (mode, histogram) in &histograms {
        histogram_rows(&mut rows, "2 hit histogram", mode, histogram);
    }
    set_lookaside_enabled(true);

    // 2b. A new thread's first launch of a warm kernel while other threads build.
    note!("bench: new threads' first launches during builds");
    for enabled in [false, true] {
        set_lookaside_enabled(enabled);
        let histogram = new_thread_first_launch(device, &kernels[0], scale.new_threads, 2)?;
        let mode = if enabled { "published index" } else { "plain protocol" };
        rows.push(Row {
            section: "2b new thread launch",
            name: format!("max, {mode} ({} threads)", histogram.total()),
            value: histogram.max as f64,
            unit: "ns",
            baseline: None,
            target: enabled.then_some(Target {
                max_value: Some(1_000_000.0),
                max_ratio: None,
                text: "max <= 1 ms",
                hardware: H200,
            }),
        });
        rows.push(Row {
            section: "2b new thread launch",
            name: format!("p99, {mode}"),
            value: histogram.quantile(0.99) as f64,
            unit: "ns",
            baseline: None,
            target: None,
        });
    }
    set_lookaside_enabled(true);

    // 3. The probe launch path against a bare backend launch plus event record.
    note!("bench: probe launch path");
    // A stream of the section's own: what earlier sections did on the thread's default stream
    // (an older array read behind newer work makes a stream record every event for a while)
    // does not carry over.
    let probe_stream = Stream::new(device)?;
    let probe_installed = streams::install_thread_local_default_stream(&probe_stream)?;
    let input = Array::arange(device, race::PROBE_ELEMENTS, DType::F32)?;
    let variant = fresh_variant();
    let full_launches = |launches: i32| -> Result<f64, jitbridge::Error> {
        let start = Instant::now();
        let mut last = None;
        for _ in 0..launches {
            last = Some(jit_race_probe_array(&input, variant)?);
        }
        if let Some(last) = last {
            last.eval()?;
        }
        Ok(start.elapsed().as_nanos() as f64 / f64::from(launches))
    };
    // Warm: the buffer cache and event pool first fill up to the depth the loop keeps in
    // flight (a driver allocation each), as the raw path's one output is allocated untimed.
    let cold_pools_ns = full_launches(scale.probe_launches)?;
    // The two alternate in blocks, so that drift of the host (the raw loop alone moves by 8%
    // between runs a second apart on the H200 host) falls on both alike.
    let (mut raw_sum, mut full_sum) = (0.0, 0.0);
    let block = (scale.probe_launches / PROBE_BLOCKS).max(1);
    for _ in 0..PROBE_BLOCKS {
        raw_sum += sys_tools::raw_probe_launches(&input, variant, block)?;
        full_sum += full_launches(block)?;
    }
    let (raw_ns, full_ns) = (raw_sum / f64::from(PROBE_BLOCKS), full_sum / f64::from(PROBE_BLOCKS));
    rows.push(Row {
        section: "3 probe launch",
        name: "per call, full path vs raw launch + event".into(),
        value: full_ns,
        unit: "ns",
        baseline: Some(raw_ns),
        target: Some(Target {
            max_value: None,
            max_ratio: Some(1.05),
            text: "<= 1.05x raw",
            hardware: H200,
        }),
    });
    rows.push(Row {
        section: "3 probe launch",
        name: "per call, the first loop (pools filling up)".into(),
        value: cold_pools_ns,
        unit: "ns",
        baseline: Some(raw_ns),
        target: None,
    });
    drop(probe_installed);

    // 4. Cold first launch against the bare compiler on a source of the same shape. NVRTC
    // keeps what it compiled in the driver's compute cache (~/.nv/ComputeCache), keyed by source
    // and program name: a source compiled before, by this process or an earlier one, compiles in
    // about a third of the time. So the baseline compiles another never-built variant (never the
    // first launch's own source), the variants are new to this host (seed_variants), and which of
    // the two runs first alternates, so neither side gets the warmer compiler.
    note!("bench: cold first launch");
    let mut first = Vec::new();
    let mut build = Vec::new();
    let mut compile = Vec::new();
    for sample in 0..scale.cold_samples {
        let (variant, other) = (fresh_variant(), fresh_variant());
        let name = format!("mlxcel_jit_race_probe_v{other}");
        let fresh_source = CustomKernel::new(&KernelSpec {
            name: &name,
            inputs: &[("inp", DType::F32)],
            outputs: &[("out", DType::F32)],
            body: sys_tools::probe_body(),
            ..Default::default()
        })?;
        if sample % 2 == 1 {
            compile.push(sys_tools::compile_only(&fresh_source, device)?);
        }
        let before = jitbridge::Counters::read();
        let start = Instant::now();
        jit_race_probe_array(&input, variant)?.eval()?;
        first.push(start.elapsed().as_nanos() as f64);
        build.push(jitbridge::Counters::read().since(&before).build_ns as f64);
        if sample % 2 == 0 {
            compile.push(sys_tools::compile_only(&fresh_source, device)?);
        }
    }
    let compile = median(compile);
    rows.push(Row {
        section: "4 cold first launch",
        name: format!("median of {}, first launch vs compiler alone", scale.cold_samples),
        value: median(first),
        unit: "ns",
        baseline: Some(compile),
        target: Some(Target {
            max_value: None,
            max_ratio: Some(1.05),
            text: "<= 1.05x",
            hardware: H200,
        }),
    });
    rows.push(Row {
        section: "4 cold first launch",
        name: "of which the build (compile + module load)".into(),
        value: median(build),
        unit: "ns",
        baseline: Some(compile),
        target: None,
    });
    // The same first launch, timed step by step inside the library.
    let steps: Vec<sys_tools::ColdSteps> = (0..scale.cold_samples)
        .map(|_| sys_tools::cold_probe_steps(&input, fresh_variant()))
        .collect::<Result<_, _>>()?;
    let step = |f: fn(&sys_tools::ColdSteps) -> f64| median(steps.iter().map(f).collect());
    type Step = fn(&sys_tools::ColdSteps) -> f64;
    let step_rows: [(&str, Step); 11] = [
        ("step: first launch as a whole", |s| s.total_ns),
        ("step: staging (lookup, build, outputs)", |s| s.stage_ns),
        ("step: compile", |s| s.compile_ns),
        ("step: module load", |s| s.load_ns),
        ("step: get function", |s| s.get_function_ns),
        ("step: configure", |s| s.configure_ns),
        ("step: disk-cache store (probes skip it)", |s| s.disk_store_ns),
        ("step: first launch call", |s| s.launch_ns),
        ("step: holds (the event is recorded lazily)", |s| s.record_ns),
        ("step: wait for the kernel", |s| s.sync_ns),
        ("same source compiled again (NVRTC: a cache hit)", |s| s.compile_again_ns),
    ];
    for (name, f) in step_rows {
        rows.push(Row {
            section: "4 cold first launch",
            name: name.into(),
            value: step(f),
            unit: "ns",
            baseline: Some(compile),
            target: None,
        });
    }

    // 5. First launch in a new process: compiled (empty disk cache) against loaded from disk.
    note!("bench: first launch in a new process");
    let (cold, warm) =
        new_process::first_launch_in_new_processes(device, scale.new_process_rounds)?;
    rows.push(Row {
        section: "5 new process",
        name: "first launch, entry on disk vs no entry".into(),
        value: warm,
        unit: "ns",
        baseline: Some(cold),
        target: Some(Target {
            max_value: Some(300_000.0),
            max_ratio: None,
            text: "warm <= 0.3 ms",
            hardware: H200_CUDA,
        }),
    });

    // 6. The soak's decode step alone and while other workers first-launch new kernels.
    note!("bench: decode steps during first launches (a short soak)");
    let others = crate::soak::Workers { fork: false, ..crate::soak::Workers::ALL };
    let soak =
        crate::soak::run(device, scale.soak_seconds, others, crate::soak::DecodeMode::Library)?;
    if !soak.exact() {
        let first = soak.first_errors.first().cloned().unwrap_or_default();
        return Err(jitbridge::Error::new_other(format!(
            "the soak's outputs were not exact: {first}"
        )));
    }
    if soak.decode_alone.steps == 0 || soak.decode_together.steps == 0 {
        return Err(jitbridge::Error::new_other("the soak measured no decode step in a phase"));
    }
    for (name, alone, together) in [
        (
            "decode step p50, with first launches vs alone",
            soak.decode_alone.p50_ns,
            soak.decode_together.p50_ns,
        ),
        (
            "decode step p99, with first launches vs alone",
            soak.decode_alone.p99_ns,
            soak.decode_together.p99_ns,
        ),
    ] {
        let p99 = name.contains("p99");
        rows.push(Row {
            section: "6 decode under load",
            name: format!("{name} ({} s soak)", scale.soak_seconds),
            value: together as f64,
            unit: "ns",
            baseline: Some(alone as f64),
            target: p99.then_some(Target {
                max_value: None,
                max_ratio: Some(crate::soak::MAX_P99_RATIO),
                text: "<= 1.1x",
                hardware: H200,
            }),
        });
    }
    Ok(rows)
}
