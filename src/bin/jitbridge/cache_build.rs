//! `jitbridge cache build`: the compile farm from the command line, and the hidden
//! `__build-worker` subcommand that is its worker (the command is the worker program, so no
//! second program has to be installed, and the worker links the very library whose keys the
//! parent looks for).

use crate::progress::Progress;
use crate::{Failure, Outcome};
use jitbridge::disk_cache;
use std::path::Path;

/// `--jobs N`: a whole number from 1 to the farm's most; `None` when not given.
pub fn parse_jobs(text: Option<&str>) -> Result<Option<usize>, String> {
    let Some(text) = text else { return Ok(None) };
    match text.parse::<usize>() {
        Ok(n) if (1..=disk_cache::MAX_BUILD_JOBS).contains(&n) => Ok(Some(n)),
        _ => Err(format!(
            "--jobs takes a whole number from 1 to {}, not '{text}'",
            disk_cache::MAX_BUILD_JOBS
        )),
    }
}

/// How often the progress line is redrawn on a terminal.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Builds the manifest's or bundle's (`file`) missing kernels for `device` with `jobs` workers
/// (this command's own program) in the background, a progress line on a terminal meanwhile,
/// then loads them; says what each step did and how long it took.
pub fn build(file: &Path, device: jitbridge::Device, jobs: Option<usize>) -> Outcome {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::Error(format!("cannot find this command's program: {e}")))?;
    let jobs = jobs.unwrap_or_else(disk_cache::usable_processors);
    let before = jitbridge::Counters::read();
    let start = std::time::Instant::now();
    let job = disk_cache::prewarm_build_start(device, file, Some(jobs), Some(&exe))?;
    let mut progress = Progress::new();
    while progress.terminal() {
        let p = job.progress();
        if p.is_done() {
            break;
        }
        progress.show(&format!(
            "building {}/{} kernels: {} failed, {} pending, {:.1} s",
            p.built,
            p.total,
            p.failed,
            p.pending,
            start.elapsed().as_secs_f64()
        ));
        std::thread::sleep(PROGRESS_EVERY);
    }
    progress.finish();
    let r = job.wait()?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let compiles = jitbridge::Counters::read().builds - before.builds;
    out!(
        "built    {} kernels for {} with {} workers ({jobs} at once) in {ms:.1} ms",
        r.built,
        device.spec(),
        r.workers
    );
    out!("loaded   {} ({compiles} compiles in this process)", r.load.loaded);
    out!("present  {} (built already)", r.present);
    out!("failed   {} (not built by a worker: compiled at first use)", r.failed);
    out!("refused  {} (a bad source record: compiled at first use from the API)", r.refused);
    out!("no record {} (compiled at first use)", r.without_source);
    out!("other    {} (for another device)", r.other);
    Ok(r.failed == 0 && r.refused == 0 && r.load.failed == 0)
}

/// `jitbridge __build-worker DEVICE KEY:RECORD...`, started by the farm only.
pub fn worker(args: &[String]) -> Outcome {
    let program = std::env::args().next().unwrap_or_else(|| "jitbridge".into());
    let mut all = vec![program, disk_cache::BUILD_WORKER_ARG.to_string()];
    all.extend_from_slice(args);
    let status = disk_cache::build_worker_main(&all);
    // The reports are written; the worker's exit status says nothing the farm reads.
    std::process::exit(status);
}

#[cfg(test)]
mod tests {
    use super::parse_jobs;

    #[test]
    fn jobs_are_one_to_the_most() {
        assert_eq!(parse_jobs(None), Ok(None));
        assert_eq!(parse_jobs(Some("1")), Ok(Some(1)));
        assert_eq!(parse_jobs(Some("1024")), Ok(Some(1024)));
        for bad in ["0", "1025", "-1", "two", "", "99999999999999999999999"] {
            assert!(parse_jobs(Some(bad)).unwrap_err().contains("--jobs takes"), "{bad}");
        }
    }
}
