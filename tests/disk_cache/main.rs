//! The disk cache, seen from new processes: each test re-runs this test binary as a child (the
//! `child_entry` test, inert unless JB_DISK_TEST_CHILD is set) with its own cache folder. This
//! file is that harness; the tests are grouped by behaviour, one module each (a new test goes in
//! the module of its behaviour, or a new module).

#[path = "../common/mod.rs"]
mod common;

mod failing_disk;
mod folder;
mod maintenance;
mod planted_code;
mod shared_folder;
mod store_and_load;

use jitbridge::{Array, Counters, CustomKernel, DType, Device, KernelSpec, LaunchShape};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const CHILD: &str = "JB_DISK_TEST_CHILD";
const FIRST: &str = "JB_DISK_TEST_FIRST";
const CHDIR: &str = "JB_DISK_TEST_CHDIR";
const GO: &str = "JB_DISK_TEST_GO";

/// A kernel whose source depends on `salt`, so that salts are distinct cache entries.
fn salted_kernel(salt: u32) -> CustomKernel {
    let body = format!("out[thread_index()] = inp[thread_index()] * 3.0f + {salt}.0f;");
    common::vouched_kernel(&KernelSpec {
        name: "disk_cached",
        inputs: &[("inp", DType::F32)],
        outputs: &[("out", DType::F32)],
        body: &body,
        ..Default::default()
    })
    .unwrap()
}

fn launch_salts(input: &Array, salts: &str) -> bool {
    let mut exact = true;
    for salt in salts.split(',').filter(|s| !s.is_empty()).map(|s| s.parse::<u32>().unwrap()) {
        // SAFETY: 64 threads, each its own element of two 64-element arrays.
        let out = unsafe {
            salted_kernel(salt).launch_unchecked(&[input], &[&[64]], LaunchShape::Threads(64))
        };
        let values = out.unwrap()[0].to_vec::<f32>().unwrap();
        exact &= values.iter().enumerate().all(|(i, &v)| v == i as f32 * 3.0 + salt as f32);
    }
    exact
}

/// Waits (at most 20 s) until `path` exists.
fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < Duration::from_secs(20), "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// In the child: launch the kernels the parent asked for and report the counters. With
/// JB_DISK_TEST_FIRST, those salts are launched first; with JB_DISK_TEST_CHDIR, the child then
/// changes directory; with JB_DISK_TEST_GO, it then writes GO.ready and waits for GO, so that
/// the parent can change the disk in between.
#[test]
fn child_entry() {
    let Ok(job) = std::env::var(CHILD) else { return };
    if let Some(op) = job.strip_prefix("admin:") {
        return admin(op);
    }
    let device = Device::cpu().unwrap();
    let input = Array::arange(device, 64, DType::F32).unwrap();
    if let Some(salt) = job.strip_prefix("try:") {
        return try_launch(&input, salt);
    }
    let mut exact = launch_salts(&input, &std::env::var(FIRST).unwrap_or_default());
    if let Ok(dir) = std::env::var(CHDIR) {
        std::env::set_current_dir(dir).unwrap();
    }
    if let Ok(go) = std::env::var(GO) {
        std::fs::write(format!("{go}.ready"), b"").unwrap();
        wait_for(Path::new(&go));
    }
    // Timed from here: the launches that meet the disk, not process start or device set-up.
    let launched = Instant::now();
    if job == "euid" {
        unsafe extern "C" {
            fn geteuid() -> u32;
        }
        // SAFETY: geteuid has no preconditions.
        return println!("EUID {}", unsafe { geteuid() });
    }
    if job == "gpu" {
        eprintln!("GPU {:?}", Device::gpu(0).err()); // only loading the library matters
    } else if job == "probe" {
        let out = jitbridge::jit_race_probe_array(&input, 7).unwrap();
        exact &= jitbridge::race::probe_output_exact(&out.to_vec::<f32>().unwrap());
    } else {
        exact &= launch_salts(&input, &job);
    }
    let launch_ms = launched.elapsed().as_secs_f64() * 1e3;
    let c = Counters::read();
    println!(
        "RESULT builds={} disk_hits={} disk_misses={} disk_rejected={} launch_ms={launch_ms:.1} \
         exact={exact}",
        c.builds, c.disk_hits, c.disk_misses, c.disk_rejected
    );
}

/// In the child: launch FIRST, wait for GO, launch `salt`; print "TRY ok" or the first error.
fn try_launch(input: &Array, salt: &str) {
    let launch = |salt: &str| {
        let kernel = salted_kernel(salt.parse().unwrap());
        // SAFETY: 64 threads, each its own element of two 64-element arrays.
        unsafe { kernel.launch_unchecked(&[input], &[&[64]], LaunchShape::Threads(64)) }.map(|_| ())
    };
    let mut outcome = launch(&std::env::var(FIRST).unwrap());
    let go = std::env::var(GO).unwrap();
    std::fs::write(format!("{go}.ready"), b"").unwrap();
    wait_for(Path::new(&go));
    outcome = outcome.and_then(|()| launch(salt));
    match outcome {
        Ok(()) => println!("TRY ok"),
        Err(e) => println!("TRY err {e}"),
    }
}

/// In the child: one maintenance call, its outcome printed as ADMIN and PROBLEM lines.
fn admin(op: &str) {
    use jitbridge::disk_cache;
    let outcome = match op {
        "show" => disk_cache::stats().map(|(entries, bytes)| {
            format!(
                "dir={} entries={entries} bytes={bytes} state={}",
                disk_cache::dir(),
                disk_cache::state()
            )
        }),
        "clear" => disk_cache::prune(0).map(|removed| format!("removed={removed}")),
        "check" | "fix" => disk_cache::check(op == "fix").map(|report| {
            for p in &report.problems {
                println!("PROBLEM {} {}", p.entry, p.problem);
            }
            format!("valid={} invalid={}", report.valid, report.invalid)
        }),
        _ => panic!("unknown admin job {op}"),
    };
    match outcome {
        Ok(text) => println!("ADMIN ok {text}"),
        Err(e) => println!("ADMIN err {e}"),
    }
}

/// Runs one maintenance call in a child: (Ok(summary) or Err(message), PROBLEM lines).
fn run_admin(cmd: &mut Command) -> (Result<String, String>, Vec<String>) {
    let output = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "child failed: {stdout}");
    // The harness prints "test child_entry ... " before the child's first line.
    let problems =
        stdout.lines().filter_map(|l| l.find("PROBLEM ").map(|at| l[at + 8..].to_string()));
    let problems = problems.collect();
    let line = stdout.lines().find_map(|l| l.find("ADMIN ").map(|at| &l[at + 6..])).unwrap();
    let outcome = match line.strip_prefix("ok ") {
        Some(text) => Ok(text.to_string()),
        None => Err(line.strip_prefix("err ").unwrap().to_string()),
    };
    (outcome, problems)
}

struct Report {
    builds: u64,
    disk_hits: u64,
    disk_misses: u64,
    disk_rejected: u64,
    /// How long the child's launches took, disk lookups included.
    launch_ms: f64,
    stderr: String,
}

fn child_command(dir: &Path, job: &str) -> Command {
    child_command_of(&std::env::current_exe().unwrap(), dir, job)
}

/// A child running `program` (this test binary or a copy of it).
fn child_command_of(program: &Path, dir: &Path, job: &str) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD, job)
        .env("JITBRIDGE_CACHE_DIR", dir)
        .env_remove("JITBRIDGE_DISK_CACHE")
        .env_remove("JITBRIDGE_DISK_CACHE_FAULT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn parse(output: Output) -> Report {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "child failed: {stdout}\n{stderr}");
    // The harness prints "test child_entry ... " before the child's own line.
    let line = stdout
        .lines()
        .find_map(|l| l.find("RESULT ").map(|at| &l[at..]))
        .unwrap_or_else(|| panic!("no RESULT line in: {stdout}\n{stderr}"));
    let field = |name: &str| -> String {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")).map(str::to_string))
            .unwrap()
    };
    assert_eq!(field("exact"), "true", "a child's output was wrong: {line}");
    let number = |name: &str| field(name).parse().unwrap();
    Report {
        builds: number("builds"),
        disk_hits: number("disk_hits"),
        disk_misses: number("disk_misses"),
        disk_rejected: number("disk_rejected"),
        launch_ms: field("launch_ms").parse().unwrap(),
        stderr,
    }
}

fn run_child(dir: &Path, job: &str) -> Report {
    parse(child_command(dir, job).output().unwrap())
}

fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("jb-disk-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|x| x == "jbc"));
    files.sort();
    files
}

fn is_root() -> bool {
    unsafe extern "C" {
        fn geteuid() -> u32;
    }
    // SAFETY: geteuid has no preconditions.
    unsafe { geteuid() == 0 }
}

/// The file name the entry of `salt` gets: found by letting a process store it elsewhere. Each
/// call has its own folder: tests that ask for one salt run in parallel.
fn entry_name(salt: u32) -> (String, Vec<u8>) {
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = fresh_dir(&format!("name{salt}-{call}"));
    run_child(&dir, &salt.to_string());
    let entry = entries(&dir).pop().unwrap();
    let bytes = std::fs::read(&entry).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    (entry.file_name().unwrap().to_str().unwrap().to_string(), bytes)
}

fn make_fifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    unsafe extern "C" {
        fn mkfifo(path: *const std::ffi::c_char, mode: u32) -> i32;
    }
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}
