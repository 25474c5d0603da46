//! The `jitbridge` command: runs the race-probe scenario and reports, or prints what it sees.

mod bench;

use jitbridge::{Counters, Device, DeviceKind, race};
use std::process::ExitCode;
use std::time::Instant;

const USAGE: &str = "usage:
  jitbridge [run] [--threads N] [--rounds N] [--device cpu|gpu[:N]]
      first-launch a new probe kernel from N threads at once, once per round (8 x 16 by default),
      on the default device, and report builds, hits and whether every output was exact
  jitbridge bench [--json] [--device cpu|gpu[:N]]
      the launch path's costs against their baselines, in one run: hit lookups (lookaside vs
      the plain locked protocol) at 1-16 threads, hit latency while other threads build, the
      probe launch path vs a raw launch, a cold first launch vs the compiler alone
  jitbridge cache [show | clear | prune SIZE[K|M|G] | verify]
      the disk cache of compiled code: its folder, state, entries and bytes; remove every entry;
      remove the oldest until SIZE remain; read every entry and count the malformed ones
  jitbridge info
      the backend, the devices, the compiler and the counters";

struct RunOptions {
    threads: usize,
    rounds: usize,
    device: Option<String>,
}

fn usage_error(message: String) -> String {
    format!("{message}\n{USAGE}")
}

fn parse_device(spec: &str) -> Result<Device, String> {
    let result = match spec {
        "cpu" => Device::cpu(),
        "gpu" => Device::gpu(0),
        other => match other.strip_prefix("gpu:").and_then(|n| n.parse().ok()) {
            Some(n) => Device::gpu(n),
            None => return Err(format!("unknown device '{other}' (cpu, gpu or gpu:N)")),
        },
    };
    result.map_err(|e| e.to_string())
}

fn parse_run(args: &[String]) -> Result<RunOptions, String> {
    let mut options = RunOptions { threads: 8, rounds: 16, device: None };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--threads" => {
                options.threads =
                    value("--threads")?.parse().map_err(|e| format!("--threads: {e}"))?
            }
            "--rounds" => {
                options.rounds = value("--rounds")?.parse().map_err(|e| format!("--rounds: {e}"))?
            }
            "--device" => options.device = Some(value("--device")?),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    if options.threads == 0 || options.rounds == 0 {
        return Err("--threads and --rounds must be at least 1".into());
    }
    Ok(options)
}

fn parse_bench(args: &[String]) -> Result<(Option<String>, bool), String> {
    let (mut device, mut json) = (None, false);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--json" => json = true,
            "--device" => device = Some(it.next().cloned().ok_or("--device needs a value")?),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok((device, json))
}

fn run(options: RunOptions) -> Result<bool, String> {
    let device = match &options.device {
        Some(spec) => parse_device(spec)?,
        None => Device::default_device().map_err(|e| e.to_string())?,
    };
    let before = Counters::read();
    let start = Instant::now();
    let mut all_exact = true;
    let mut failures = Vec::new();
    for round in 0..options.rounds {
        // Every round first-launches a variant no earlier round built.
        let variant = round as i32;
        let variants = vec![variant; options.threads];
        let outcomes = race::first_launch_round(device, jitbridge::jit_race_probe_array, &variants);
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
        if options.rounds >= 4 {
            eprint!("\rround {}/{}", round + 1, options.rounds);
        }
    }
    if options.rounds >= 4 {
        eprintln!();
    }
    let elapsed = start.elapsed();
    let delta = Counters::read().since(&before);
    let (cold, cached) = probe_launch_times(device).map_err(|e| e.to_string())?;
    println!("backend      {}", device.backend());
    println!("device       {} ({}, index {})", device.name(), device.arch(), device.index());
    println!("rounds       {}", options.rounds);
    println!("threads      {}", options.threads);
    println!("builds       {} (expected {})", delta.builds, options.rounds);
    println!("hits         {}", delta.hits);
    println!("misses       {}", delta.misses);
    println!("build time   {:.1} ms", delta.build_ns as f64 / 1e6);
    println!("exact        {}", if all_exact { "yes, every output" } else { "NO" });
    println!("time         {:.1} ms", elapsed.as_secs_f64() * 1e3);
    println!(
        "first launch {:.2} ms (cold: build and launch of a new probe, one thread)",
        cold * 1e3
    );
    println!(
        "cached       {:.2} us per probe launch (warm module, {CACHED_LAUNCHES} launches)",
        cached * 1e6
    );
    for failure in failures.iter().take(5) {
        println!("error        {failure}");
    }
    Ok(all_exact && delta.builds == options.rounds as u64)
}

const CACHED_LAUNCHES: u32 = 2000;

/// Seconds for one cold first launch (build included) and per warm launch of the probe.
fn probe_launch_times(device: Device) -> Result<(f64, f64), jitbridge::Error> {
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

fn parse_size(text: &str) -> Result<u64, String> {
    let (digits, scale) = match text.char_indices().last() {
        Some((at, 'K' | 'k')) => (&text[..at], 1u64 << 10),
        Some((at, 'M' | 'm')) => (&text[..at], 1u64 << 20),
        Some((at, 'G' | 'g')) => (&text[..at], 1u64 << 30),
        _ => (text, 1),
    };
    let value: u64 = digits.parse().map_err(|_| format!("'{text}' is not a size"))?;
    value.checked_mul(scale).ok_or_else(|| format!("'{text}' is too large"))
}

fn cache_command(args: &[String]) -> Result<bool, String> {
    use jitbridge::disk_cache;
    let show = || -> Result<(), String> {
        println!("folder   {}", disk_cache::dir());
        println!("state    {}", disk_cache::state());
        if let Ok((entries, bytes)) = disk_cache::stats() {
            println!("entries  {entries}");
            println!("bytes    {bytes}");
        }
        Ok(())
    };
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [] | ["show"] => show().map(|_| true),
        ["clear"] => {
            let removed = disk_cache::prune(0).map_err(|e| e.to_string())?;
            println!("removed  {removed} entries");
            Ok(true)
        }
        ["prune", size] => {
            let removed = disk_cache::prune(parse_size(size)?).map_err(|e| e.to_string())?;
            println!("removed  {removed} entries");
            show().map(|_| true)
        }
        ["verify"] => {
            let (valid, invalid) = disk_cache::verify().map_err(|e| e.to_string())?;
            println!("valid    {valid}\ninvalid  {invalid}");
            Ok(invalid == 0)
        }
        _ => Err(usage_error(format!("unknown cache arguments {args:?}"))),
    }
}

/// For `jitbridge bench`: in a fresh process, time the first launch of a fixed kernel (the
/// device already opened) and print it with the counters.
fn first_launch(args: &[String]) -> Result<bool, String> {
    let device = match args.first() {
        Some(spec) => parse_device(spec)?,
        None => Device::default_device().map_err(|e| e.to_string())?,
    };
    let fail = |e: jitbridge::Error| e.to_string();
    let input = jitbridge::Array::arange(device, 256, jitbridge::DType::F32).map_err(fail)?;
    input.eval().map_err(fail)?;
    let kernel = jitbridge::CustomKernel::new(&jitbridge::KernelSpec {
        name: "bench_first_launch",
        inputs: &[("inp", jitbridge::DType::F32)],
        outputs: &[("out", jitbridge::DType::F32)],
        body: "out[thread_index()] = inp[thread_index()] * 2.0f + 1.0f;",
        header: None,
        configure: None,
    })
    .map_err(fail)?;
    let start = Instant::now();
    let out =
        kernel.launch(&[&input], &[&[256]], jitbridge::LaunchShape::Threads(256)).map_err(fail)?;
    out[0].eval().map_err(fail)?;
    let ns = start.elapsed().as_nanos();
    let exact = race::probe_output_exact(&out[0].to_vec::<f32>().map_err(fail)?);
    let c = Counters::read();
    println!("first_launch_ns={ns} builds={} disk_hits={} exact={exact}", c.builds, c.disk_hits);
    Ok(exact)
}

fn info() -> Result<(), String> {
    println!("jitbridge {}", env!("CARGO_PKG_VERSION"));
    println!("gpu backend  {}", jitbridge::gpu_backend());
    println!("cpu compiler {}", jitbridge::cpu_compiler());
    match Device::count(DeviceKind::Gpu) {
        Ok(0) => {
            let why = Device::gpu(0).err().map(|e| e.to_string()).unwrap_or_default();
            println!("gpus         none ({why})");
        }
        Ok(n) => println!("gpus         {n}"),
        Err(e) => println!("gpus         unknown ({e})"),
    }
    for device in Device::all().map_err(|e| e.to_string())? {
        println!(
            "device {:<5} {:<5} {} ({}), {:.1} GiB",
            device.index(),
            device.backend(),
            device.name(),
            device.arch(),
            device.total_memory() as f64 / (1u64 << 30) as f64
        );
    }
    println!("disk cache   {} ({})", jitbridge::disk_cache::dir(), jitbridge::disk_cache::state());
    let c = Counters::read();
    println!(
        "counters     builds {} failures {} hits {} misses {} configures {} build time {:.1} ms",
        c.builds,
        c.build_failures,
        c.hits,
        c.misses,
        c.configures,
        c.build_ns as f64 / 1e6
    );
    if race::removed_locks() != 0 {
        println!("WARNING      test-only build without locks (mask {})", race::removed_locks());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("info") => info().map(|_| true),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(true)
        }
        Some("bench") => parse_bench(&args[1..]).map_err(usage_error).and_then(|(device, json)| {
            let device = match device {
                Some(spec) => parse_device(&spec)?,
                None => Device::default_device().map_err(|e| e.to_string())?,
            };
            let rows = bench::run(device).map_err(|e| e.to_string())?;
            if json {
                bench::print_json(device, &rows);
            } else {
                bench::print_table(device, &rows);
            }
            Ok(true)
        }),
        Some("cache") => cache_command(&args[1..]),
        Some("__first-launch") => first_launch(&args[1..]),
        Some("run") => parse_run(&args[1..]).map_err(usage_error).and_then(run),
        _ => parse_run(&args).map_err(usage_error).and_then(run),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("jitbridge: {message}");
            ExitCode::from(2)
        }
    }
}
