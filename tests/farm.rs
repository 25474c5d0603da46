//! The compile farm from Rust and from the command: a manifest of kernels with source records
//! (made by another process, their entries then removed) is built by `jitbridge` worker
//! processes and loaded with 0 compiles here; a second run finds them present; bad jobs counts
//! and workers are refused with clear errors. One test in this binary: the cache folder is read
//! once per process, from the environment.

mod common;

use jitbridge::disk_cache;
use jitbridge::{Counters, Device, ErrorCode};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const KERNELS: usize = 6;

fn jitbridge(cache: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_jitbridge"));
    command
        .env("JITBRIDGE_CACHE_DIR", cache)
        .env_remove("JITBRIDGE_MANIFEST")
        .env_remove("JITBRIDGE_CACHE_BUNDLE")
        .env_remove("JITBRIDGE_DISK_CACHE")
        .env_remove("JITBRIDGE_REMOTE_CACHE");
    command
}

fn remove_entries(cache: &Path) {
    for entry in std::fs::read_dir(cache).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "jbc") {
            std::fs::remove_file(path).unwrap();
        }
    }
}

#[test]
fn the_farm_builds_a_manifest_in_workers_and_this_process_only_loads() {
    let dir = std::env::temp_dir().join(format!("jb-farm-rs-{}", std::process::id()));
    let (cache, manifest) = (dir.join("cache"), dir.join("kernels.manifest"));
    std::fs::create_dir_all(&dir).unwrap();
    // SAFETY: the only test of this binary, before the library reads them.
    unsafe {
        std::env::set_var("JITBRIDGE_CACHE_DIR", &cache);
        std::env::remove_var("JITBRIDGE_MANIFEST");
        std::env::remove_var("JITBRIDGE_CACHE_BUNDLE");
        std::env::remove_var("JITBRIDGE_DISK_CACHE");
        std::env::remove_var("JITBRIDGE_BUILD_WORKER");
    }
    // Another process compiles the kernels, writing their manifest lines and records.
    let salt = format!("farm test {}", std::process::id());
    let mut make = jitbridge(&cache);
    make.args(["__warm-start", "cpu", &salt, &KERNELS.to_string(), "1"])
        .env("JITBRIDGE_MANIFEST", &manifest);
    let made = common::finish(make, Duration::from_secs(120));
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    remove_entries(&cache);

    let cpu = Device::cpu().unwrap();
    let worker = Path::new(env!("CARGO_BIN_EXE_jitbridge"));
    let before = Counters::read();
    let r = disk_cache::prewarm_build(cpu, &manifest, Some(2), Some(worker)).unwrap();
    let k = KERNELS as u64;
    assert_eq!((r.built, r.failed, r.refused, r.workers, r.load.loaded), (k, 0, 0, 2, k), "{r:?}");
    assert_eq!(Counters::read().since(&before).builds, 0, "compiled in this process");
    let again = disk_cache::prewarm_build(cpu, &manifest, None, Some(worker)).unwrap();
    assert_eq!((again.present, again.workers), (k, 0), "{again:?}");

    // In the background: the handle returns at once, its counters end at every kernel built
    // by a worker, the wait gives what prewarm_build gives; 0 compiles here.
    let background = dir.join("background.manifest");
    let mut make = jitbridge(&cache);
    make.args(["__warm-start", "cpu", &format!("{salt} background"), &KERNELS.to_string(), "1"])
        .env("JITBRIDGE_MANIFEST", &background);
    let made = common::finish(make, Duration::from_secs(120));
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    remove_entries(&cache);
    let before = Counters::read();
    let farm_built = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = farm_built.clone();
    jitbridge::set_event_callback(move |e| {
        if e.kind == jitbridge::CacheEventKind::FarmBuilt {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    })
    .unwrap();
    let job = disk_cache::prewarm_build_start(cpu, &background, Some(2), Some(worker)).unwrap();
    let mut progress = job.progress();
    while !progress.is_done() {
        std::thread::sleep(Duration::from_millis(10));
        progress = job.progress();
    }
    assert_eq!((progress.total, progress.built, progress.failed, progress.pending), (k, k, 0, 0));
    let r = job.wait().unwrap();
    jitbridge::clear_event_callback().unwrap();
    assert_eq!((r.built, r.workers, r.load.loaded), (k, 2, k), "{r:?}");
    assert_eq!(farm_built.load(std::sync::atomic::Ordering::Relaxed), k, "farm built events");
    assert_eq!(Counters::read().since(&before).builds, 0, "compiled in this process");
    // Refusals come at once; a dropped handle waits; a detached one frees itself.
    let e = disk_cache::prewarm_build_start(cpu, &background, Some(0), Some(worker)).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e}");
    drop(disk_cache::prewarm_build_start(cpu, &background, Some(2), Some(worker)).unwrap());
    disk_cache::prewarm_build_start(cpu, &background, Some(2), Some(worker)).unwrap().detach();

    // Bad jobs counts and workers: clear errors.
    // (1 << 32) + 2 would be 2 if it were cut to 32 bits.
    for jobs in [0, disk_cache::MAX_BUILD_JOBS + 1, (1 << 32) + 2, usize::MAX] {
        let e = disk_cache::prewarm_build(cpu, &manifest, Some(jobs), Some(worker)).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArgument, "{jobs}: {e}");
        assert!(e.message().contains("jobs must be 1 to 1024"), "{jobs}: {e}");
    }
    let e = disk_cache::prewarm_build(cpu, &manifest, Some(2), Some(Path::new("jitbridge")))
        .unwrap_err();
    assert!(e.message().contains("must be an absolute path"), "{e}");
    let e = disk_cache::prewarm_build(cpu, &manifest, Some(2), None).unwrap_err();
    assert!(e.message().contains("JITBRIDGE_BUILD_WORKER"), "{e}");

    // The command, in a new process: its own program is the worker.
    remove_entries(&cache);
    let mut build = jitbridge(&cache);
    build.args(["cache", "build"]).arg(&manifest).args(["--jobs", "2"]);
    let out = common::finish(build, Duration::from_secs(120));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains(&format!("built    {KERNELS} kernels for cpu:0 with 2 workers")),
        "{text}"
    );
    assert!(text.contains(&format!("loaded   {KERNELS} (0 compiles in this process)")), "{text}");
    let mut bad = jitbridge(&cache);
    bad.args(["cache", "build"]).arg(&manifest).args(["--jobs", "0"]);
    let out = common::finish(bad, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--jobs takes a whole number"));
    std::fs::remove_dir_all(&dir).unwrap();
}
