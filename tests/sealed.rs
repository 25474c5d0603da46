//! Sealed mode, with the compiler counted: each scenario runs in a child process whose CC is a
//! script that writes a line per run. Sealed to refuse, a new kernel fails with
//! `ErrorCode::Sealed` naming it and the script never compiles, while a kernel in memory still
//! launches; unsealed, the same kernel compiles. Sealed to warn, it compiles with one warning.

mod common;

use jitbridge::{CustomKernel, DType, Device, ErrorCode, KernelSpec, SealMode};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CHILD: &str = "JB_SEALED_TEST_CHILD";

fn kernel(name: &str, salt: u32) -> CustomKernel {
    common::vouched_kernel(&KernelSpec {
        name,
        inputs: &[("inp", DType::F32)],
        outputs: &[("out", DType::F32)],
        body: &format!("out[thread_index()] = inp[thread_index()] * {salt}.0f;"),
        ..Default::default()
    })
    .unwrap()
}

/// Compiles counted by the script (its version queries, which name it in the cache folder's
/// keys, are not compiles).
fn compiles(count: &Path) -> usize {
    std::fs::read_to_string(count).unwrap_or_default().lines().filter(|l| *l != "--version").count()
}

/// The scenario, in the child: JITBRIDGE_SEAL, if set, was read at the first use of the seal.
fn child(job: &str, count: &Path) {
    let cpu = Device::cpu().unwrap();
    let salt = std::process::id();
    let warm = kernel("sealed_warm", salt);
    let fresh = kernel("sealed_fresh", salt);
    match job {
        "error" => {
            warm.prepare(cpu).unwrap();
            jitbridge::seal(SealMode::Error).unwrap();
            let before = compiles(count);
            warm.prepare(cpu).expect("a kernel in memory launches sealed");
            let err = fresh.prepare(cpu).unwrap_err();
            assert_eq!(err.code(), ErrorCode::Sealed, "{err}");
            assert!(err.message().contains(&fresh.module_name()), "{err}");
            assert_eq!(compiles(count), before, "the compiler ran while sealed");
            let c = jitbridge::Counters::read();
            assert_eq!((c.sealed_refusals, c.build_failures), (1, 0));
            jitbridge::seal(SealMode::Off).unwrap();
            fresh.prepare(cpu).expect("unsealed, it compiles");
            assert_eq!(compiles(count), before + 1);
        }
        "env" => {
            assert_eq!(jitbridge::seal_mode(), SealMode::Error, "JITBRIDGE_SEAL=error");
            let err = fresh.prepare(cpu).unwrap_err();
            assert_eq!(err.code(), ErrorCode::Sealed, "{err}");
            assert_eq!(compiles(count), 0, "the compiler ran in a process sealed from the start");
        }
        "warn" => {
            let warnings = Arc::new(Mutex::new(Vec::new()));
            let sink = warnings.clone();
            jitbridge::set_log_callback(move |w| sink.lock().unwrap().push(w.to_string())).unwrap();
            jitbridge::seal(SealMode::Warn).unwrap();
            fresh.prepare(cpu).unwrap();
            assert_eq!(compiles(count), 1);
            let warnings = warnings.lock().unwrap();
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert!(warnings[0].contains(&fresh.module_name()), "{warnings:?}");
            assert_eq!(jitbridge::Counters::read().sealed_warnings, 1);
        }
        other => panic!("no job {other}"),
    }
    println!("RESULT ok");
}

#[test]
fn child_entry() {
    if let (Some(job), Some(count)) = (std::env::var_os(CHILD), std::env::var_os("JB_COUNT")) {
        child(job.to_str().unwrap(), Path::new(&count));
    }
}

/// Runs `job` in a child with a counting CC; `seal` is its JITBRIDGE_SEAL.
fn run(job: &str, seal: Option<&str>) {
    let dir: PathBuf = std::env::temp_dir().join(format!("jb-sealed-{job}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (script, count) = (dir.join("cc"), dir.join("count"));
    let real = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$*\" >> {}\nexec {real} \"$@\"\n", count.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD, job)
        .env("JB_COUNT", &count)
        .env("CC", &script)
        .env("JITBRIDGE_CACHE_DIR", dir.join("cache"))
        .env_remove("JITBRIDGE_SEAL");
    if let Some(seal) = seal {
        cmd.env("JITBRIDGE_SEAL", seal);
    }
    let out = common::finish(cmd, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("RESULT ok"),
        "{job}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sealed_to_refuse_starts_no_compiler() {
    run("error", None);
}

#[test]
fn sealed_from_the_environment() {
    run("env", Some("error"));
}

#[test]
fn sealed_to_warn_compiles_once_warned() {
    run("warn", None);
}
