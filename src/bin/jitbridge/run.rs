//! `jitbridge run`: rounds of threads that first-launch new probe kernels at once, every output
//! checked, the builds counted.

use crate::args::{
    Command, DEVICE_OPT, Opt, device_or_default, no_positional, parse_args, parse_count, print_help,
};
use crate::progress::Progress;
use crate::{Failure, Outcome};
use jitbridge::{Counters, Device, race};
use std::time::Instant;

/// Most threads `run --threads` starts per round; each also starts a stream worker on the cpu.
pub const MAX_THREADS: u64 = 1024;
/// Most rounds `run --rounds` takes: each round's variant is a new kernel.
pub const MAX_ROUNDS: u64 = 100_000;

pub const RUN: Command = Command {
    name: "run",
    usage: "jitbridge run [--threads N] [--rounds N] [--device cpu|gpu|cuda|rocm[:N]]",
    about: "first-launch new probe kernels from many threads at once and check every output",
    details: "Each round, N threads each install their own stream, meet at a barrier and launch a
probe kernel no earlier round built; then the builds, hits, misses and timings are reported.
`jitbridge` with no command, or with only these options, runs this.

options:
  --threads N   threads per round, 1 to 1024 (default 8)
  --rounds N    rounds, 1 to 100000 (default 16)
  --device D    cpu, cuda:N, rocm:N, or gpu:N (GPU N of the first GPU backend that has
                devices); N defaults to 0 (default: gpu:0 when a GPU is present, else cpu)

Progress goes to stderr: one updating line on a terminal, plain lines otherwise.
exit status: 0 when every output was exact and each round built once, 1 when not, 2 on an error",
};

pub struct RunOptions {
    threads: usize,
    rounds: usize,
    device: Option<String>,
}

const OPTIONS: [Opt; 3] = [
    Opt { flag: "--threads", value: Some("the number of threads per round, 1 to 1024") },
    Opt { flag: "--rounds", value: Some("the number of rounds, 1 to 100000") },
    DEVICE_OPT,
];

/// True when `arg` is one of run's options (`--threads`, `--threads=8`): `jitbridge` with
/// only those runs `run`.
pub fn takes_option(arg: &str) -> bool {
    let flag = arg.split_once('=').map_or(arg, |(flag, _)| flag);
    OPTIONS.iter().any(|o| o.flag == flag)
}

pub fn run_command(args: &[String]) -> Outcome {
    let Some(args) = parse_args(&RUN, args, &OPTIONS)? else {
        print_help(&RUN);
        return Ok(true);
    };
    no_positional(&RUN, &args)?;
    let usage = |message| Failure::Usage(message, &RUN);
    let mut options = RunOptions { threads: 8, rounds: 16, device: None };
    if let Some(text) = args.get("--threads") {
        options.threads = parse_count("--threads", text, MAX_THREADS).map_err(usage)?;
    }
    if let Some(text) = args.get("--rounds") {
        options.rounds = parse_count("--rounds", text, MAX_ROUNDS).map_err(usage)?;
    }
    options.device = args.get("--device").map(str::to_string);
    run(options)
}

pub fn run(options: RunOptions) -> Outcome {
    let device = device_or_default(options.device.as_deref())?;
    let before = Counters::read();
    let start = Instant::now();
    let mut all_exact = true;
    let mut failures = Vec::new();
    let mut progress = (options.rounds >= 4).then(Progress::new);
    for round in 0..options.rounds {
        // Every round first-launches a variant no earlier round built.
        let variant = round as i32;
        let variants = vec![variant; options.threads];
        let outcomes = race::first_launch_round(device, jitbridge::jit_race_probe_array, &variants);
        let outcomes = match outcomes {
            Ok(outcomes) => outcomes,
            Err(e) => {
                if let Some(p) = &mut progress {
                    p.finish();
                }
                return Err(e.into());
            }
        };
        for outcome in outcomes {
            match outcome {
                Ok(true) => {}
                Ok(false) => all_exact = false,
                Err(e) => {
                    all_exact = false;
                    failures.push(e.to_string());
                }
            }
        }
        if let Some(p) = &mut progress {
            p.show(&format!("round {}/{}", round + 1, options.rounds));
        }
    }
    if let Some(p) = &mut progress {
        p.finish();
    }
    let elapsed = start.elapsed();
    let delta = Counters::read().since(&before);
    let (cold, cached) = probe_launch_times(device)?;
    out!("backend      {}", device.backend());
    out!("device       {} ({}, index {})", device.name(), device.arch(), device.index());
    out!("rounds       {}", options.rounds);
    out!("threads      {}", options.threads);
    out!("builds       {} (expected {})", delta.builds, options.rounds);
    out!("hits         {}", delta.hits);
    out!("misses       {}", delta.misses);
    out!("build time   {:.1} ms", delta.build_ns as f64 / 1e6);
    out!("exact        {}", if all_exact { "yes, every output" } else { "NO" });
    out!("time         {:.1} ms", elapsed.as_secs_f64() * 1e3);
    out!("first launch {:.2} ms (cold: build and launch of a new probe, one thread)", cold * 1e3);
    out!(
        "cached       {:.2} us per probe launch (warm module, {CACHED_LAUNCHES} launches)",
        cached * 1e6
    );
    for failure in failures.iter().take(5) {
        out!("error        {failure}");
    }
    Ok(all_exact && delta.builds == options.rounds as u64)
}

pub const CACHED_LAUNCHES: u32 = 2000;

/// Seconds for one cold first launch (build included) and per warm launch of the probe.
pub fn probe_launch_times(device: Device) -> Result<(f64, f64), jitbridge::Error> {
    let input = jitbridge::Array::arange(device, race::PROBE_ELEMENTS, jitbridge::DType::F32)?;
    // A variant no round used: its first launch builds.
    let variant = i32::MAX - 1;
    let start = Instant::now();
    jitbridge::jit_race_probe_array(&input, variant)?.eval()?;
    let cold = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let mut last = None;
    for _ in 0..CACHED_LAUNCHES {
        last = Some(jitbridge::jit_race_probe_array(&input, variant)?);
    }
    if let Some(last) = last {
        last.eval()?;
    }
    Ok((cold, start.elapsed().as_secs_f64() / f64::from(CACHED_LAUNCHES)))
}
