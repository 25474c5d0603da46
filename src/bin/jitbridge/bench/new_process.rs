//! Section 6 of the bench: the first launch in a new process, with and without an entry in the
//! disk cache. The bench runs `jitbridge __first-launch` (below) as its child processes.

use super::{Context, fresh_variant, median};
use crate::args::{Command, device_or_default, parse_args, print_help};
use crate::rows::{H200_CUDA, Row, Target, Unit};
use crate::{Failure, Outcome};
use jitbridge::{Counters, Device, race, sys_tools};
use std::os::unix::fs::DirBuilderExt;
use std::time::Instant;

/// Section 6: a new process's first launch, loaded from the disk cache against compiled.
pub fn new_process_first_launch(
    context: &mut Context<'_>,
    rows: &mut Vec<Row>,
) -> Result<(), jitbridge::Error> {
    let (cold, warm) =
        first_launch_in_new_processes(context.device, context.scale.new_process_rounds)?;
    rows.push(
        Row::new("new process", "first launch, entry on disk vs no entry", warm, Unit::Ns)
            .against(cold)
            .target(Target {
                max_value: Some(300_000.0),
                max_ratio: None,
                text: "warm <= 0.3 ms",
                set_for: H200_CUDA,
            }),
    );
    Ok(())
}

/// Runs `jitbridge __first-launch` twice on one fresh cache folder: the first compiles and
/// stores, the second loads. Returns (cold, warm) nanoseconds, each the median of `rounds`.
fn first_launch_in_new_processes(
    device: Device,
    rounds: usize,
) -> Result<(f64, f64), jitbridge::Error> {
    let failed = |what: String| jitbridge::Error::new_other(what);
    let exe = std::env::current_exe().map_err(|e| failed(e.to_string()))?;
    let device_arg = device.spec();
    let once = |dir: &std::path::Path, salt: &str| -> Result<(f64, u64), jitbridge::Error> {
        let out = std::process::Command::new(&exe)
            .args(["__first-launch", &device_arg, salt])
            .env("JITBRIDGE_CACHE_DIR", dir)
            .env_remove("JITBRIDGE_DISK_CACHE")
            .output()
            .map_err(|e| failed(e.to_string()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let field = |name: &str| {
            text.split_whitespace().find_map(|kv| kv.strip_prefix(name)?.parse::<f64>().ok())
        };
        match (out.status.success(), field("first_launch_ns="), field("disk_hits=")) {
            (true, Some(ns), Some(hits)) => Ok((ns, hits as u64)),
            _ => Err(failed(format!("first-launch child failed: {text}"))),
        }
    };
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        // Each round's source is new to the host: the cold child compiles it from nothing.
        let variant = fresh_variant();
        let salt = format!("salt {variant}");
        // A folder of our own, made here (0700, failing if the name is taken), never one that
        // another user could have put in the shared temporary folder first.
        let dir = std::env::temp_dir().join(format!("jb-bench-{}-{variant}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| failed(format!("cannot make {}: {e}", dir.display())))?;
        let round = || -> Result<(f64, f64), jitbridge::Error> {
            let (cold, hits) = once(&dir, &salt)?;
            if hits != 0 {
                return Err(failed("a new cache folder already held an entry".into()));
            }
            let (warm, hits) = once(&dir, &salt)?;
            if hits != 1 {
                return Err(failed("the second process did not load from disk".into()));
            }
            Ok((cold, warm))
        };
        let measured = round();
        let _ = std::fs::remove_dir_all(&dir);
        let (c, w) = measured?;
        cold.push(c);
        warm.push(w);
    }
    Ok((median(cold), median(warm)))
}

/// For `jitbridge bench`: in a fresh process, time the first launch of a fixed kernel (the
/// device already opened) and print it with the counters.
pub fn first_launch(args: &[String]) -> Outcome {
    const HIDDEN: Command = Command {
        name: "__first-launch",
        usage: "jitbridge __first-launch [cpu|gpu|cuda|rocm[:N]] [SALT]",
        about: "(internal, for bench) time one first launch in this process",
        details: "",
    };
    let Some(args) = parse_args(&HIDDEN, args, &[])? else {
        print_help(&HIDDEN);
        return Ok(true);
    };
    if let Some(extra) = args.positional.get(2) {
        return Err(Failure::Usage(format!("unexpected argument '{extra}'"), &HIDDEN));
    }
    let device = device_or_default(args.positional.first().map(String::as_str))?;
    // A salt makes the source one no process compiled before (NVRTC's compute cache misses).
    let body = match args.positional.get(1) {
        Some(salt) => format!("{} {}", sys_tools::probe_body(), super::salt_comment(salt)?),
        None => sys_tools::probe_body().to_string(),
    };
    let input = jitbridge::Array::arange(device, 256, jitbridge::DType::F32)?;
    input.eval()?;
    // SAFETY: the library's probe body, which computes on one element and subscripts its
    // arrays; the salt, from the command line, is a comment (checked).
    let kernel = unsafe {
        jitbridge::CustomKernel::new(&jitbridge::KernelSpec {
            name: "bench_first_launch",
            inputs: &[("inp", jitbridge::DType::F32)],
            outputs: &[("out", jitbridge::DType::F32)],
            body: &body,
            ..Default::default()
        })?
    };
    let start = Instant::now();
    // SAFETY: the probe's body reads and writes element thread_index() of 256, 256 threads.
    let out = unsafe {
        kernel.launch_unchecked(&[&input], &[&[256]], jitbridge::LaunchShape::Threads(256))?
    };
    out[0].eval()?;
    let ns = start.elapsed().as_nanos();
    let exact = race::probe_output_exact(&out[0].to_vec::<f32>()?);
    let c = Counters::read();
    out!("first_launch_ns={ns} builds={} disk_hits={} exact={exact}", c.builds, c.disk_hits);
    Ok(exact)
}
