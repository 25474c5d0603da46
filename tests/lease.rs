//! Leases: processes that share a cache folder compile each kernel once, and a holder killed
//! or stopped at any point holds no one up past the compile timeout. Each test re-runs this
//! test binary as children (the `child_entry` test, inert unless JB_LEASE_TEST_CHILD is set).
//! Compiles go through a slow wrapper around gcc, which also notes, for each compile, the
//! process that asked for it (the library's process: its intermediate's parent).

mod common;

use jitbridge::{Array, Counters, CustomKernel, DType, Device, LaunchShape};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CHILD: &str = "JB_LEASE_TEST_CHILD";
const GO: &str = "JB_LEASE_TEST_GO";

fn salted_kernel(salt: u32) -> CustomKernel {
    common::salted_kernel("leased", 9, salt)
}

/// In the child: wait for GO (when set), launch each salt, print the counters.
#[test]
fn child_entry() {
    let Ok(salts) = std::env::var(CHILD) else { return };
    if salts == "check" {
        let report = jitbridge::disk_cache::check(false).unwrap();
        return println!("CHECK valid={} invalid={}", report.valid, report.invalid);
    }
    let input = Array::arange(Device::cpu().unwrap(), 32, DType::F32).unwrap();
    if salts == "fail" {
        let kernel = common::f32_kernel("leased_fail", "out[thread_index()] = no_such_name;");
        // SAFETY: 32 threads, each its own element of two 32-element arrays.
        let out = unsafe { kernel.launch_unchecked(&[&input], &[&[32]], LaunchShape::Threads(32)) };
        let code = out.err().map(|e| e.code());
        return println!("FAILED compile={}", code == Some(jitbridge::ErrorCode::Compile));
    }
    if let Ok(go) = std::env::var(GO) {
        std::fs::write(format!("{go}.{}", std::process::id()), b"").unwrap();
        let start = Instant::now();
        while !Path::new(&go).exists() {
            assert!(start.elapsed() < Duration::from_secs(60), "no GO");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let start = Instant::now();
    let mut exact = true;
    for salt in salts.split(',').map(|s| s.parse::<u32>().unwrap()) {
        // SAFETY: 32 threads, each its own element of two 32-element arrays.
        let out = unsafe {
            salted_kernel(salt).launch_unchecked(&[&input], &[&[32]], LaunchShape::Threads(32))
        };
        let values = out.unwrap()[0].to_vec::<f32>().unwrap();
        exact &= values.iter().enumerate().all(|(i, &v)| v == i as f32 * 9.0 + salt as f32);
    }
    let c = Counters::read();
    println!(
        "RESULT builds={} disk_hits={} waits={} timeouts={} fallbacks={} ms={} exact={exact}",
        c.builds,
        c.disk_hits,
        c.lease_waits,
        c.lease_timeouts,
        c.lease_fallbacks,
        start.elapsed().as_millis()
    );
}

struct Setup {
    dir: PathBuf,
    cache: PathBuf,
    compiler: PathBuf,
    marks: PathBuf,
}

/// A fresh folder with a cache and a compiler that sleeps `seconds` before each compile.
fn setup(name: &str, seconds: &str) -> Setup {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("jb-lease-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let marks = dir.join("compiles");
    let gcc = Command::new("sh").args(["-c", "command -v gcc"]).output().unwrap();
    let gcc = String::from_utf8(gcc.stdout).unwrap().trim().to_string();
    let compiler = dir.join("slow-gcc");
    let script = format!(
        "#!/bin/sh\n[ \"$1\" = --version ] && exec {gcc} \"$@\"\n\
         cut -d' ' -f4 /proc/$PPID/stat >> {marks}\nsleep {seconds}\nexec {gcc} \"$@\"\n",
        marks = marks.display()
    );
    std::fs::write(&compiler, script).unwrap();
    std::fs::set_permissions(&compiler, std::fs::Permissions::from_mode(0o755)).unwrap();
    Setup { cache: dir.join("cache"), dir, compiler, marks }
}

impl Setup {
    fn child(&self, salts: &str, go: Option<&Path>) -> Command {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env(CHILD, salts)
            .env("JITBRIDGE_CACHE_DIR", &self.cache)
            .env("CC", &self.compiler)
            .env_remove("JITBRIDGE_DISK_CACHE")
            .env_remove("JITBRIDGE_CACHE_BUNDLE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(go) = go {
            cmd.env(GO, go);
        }
        cmd
    }

    /// The processes that started a compile, in order.
    fn compiles(&self) -> Vec<u32> {
        let text = std::fs::read_to_string(&self.marks).unwrap_or_default();
        text.lines().map(|l| l.trim().parse().unwrap()).collect()
    }

    /// Starts `n` children on `salts`, lets them go together once all are ready.
    fn start_together(&self, n: usize, salts: impl Fn(usize) -> String) -> Vec<Child> {
        let go = self.dir.join("go");
        let children: Vec<Child> =
            (0..n).map(|i| self.child(&salts(i), Some(&go)).spawn().unwrap()).collect();
        let start = Instant::now();
        while std::fs::read_dir(&self.dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("go."))
            .count()
            < n
        {
            assert!(start.elapsed() < Duration::from_secs(60), "the children never got ready");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::fs::write(&go, b"").unwrap();
        children
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Report {
    builds: u64,
    disk_hits: u64,
    waits: u64,
    timeouts: u64,
    fallbacks: u64,
    ms: u64,
}

/// The child's report; it must have ended well with every output exact.
fn report(child: Child) -> Report {
    report_output(child.wait_with_output().unwrap())
}

fn report_output(output: std::process::Output) -> Report {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "child failed: {stdout}\n{stderr}");
    let line = stdout.lines().find_map(|l| l.find("RESULT ").map(|at| &l[at..])).unwrap();
    assert!(line.ends_with("exact=true"), "a wrong output: {line}");
    let number = |name: &str| -> u64 {
        let prefix = format!("{name}=");
        line.split_whitespace().find_map(|kv| kv.strip_prefix(&prefix)).unwrap().parse().unwrap()
    };
    Report {
        builds: number("builds"),
        disk_hits: number("disk_hits"),
        waits: number("waits"),
        timeouts: number("timeouts"),
        fallbacks: number("fallbacks"),
        ms: number("ms"),
    }
}

fn total(reports: &[Report], field: impl Fn(&Report) -> u64) -> u64 {
    reports.iter().map(field).sum()
}

/// Eight processes first-launch one new kernel together: one compile in all; the others wait
/// for it and load its entry.
#[test]
fn eight_processes_compile_one_new_kernel_once() {
    let s = setup("eight", "0.3");
    let children = s.start_together(8, |_| "500".into());
    let reports: Vec<Report> = children.into_iter().map(report).collect();
    assert_eq!(total(&reports, |r| r.builds), 1, "{reports:?}");
    assert_eq!(total(&reports, |r| r.disk_hits), 7, "{reports:?}");
    assert_eq!(total(&reports, |r| r.waits), 7, "{reports:?}");
    assert_eq!(total(&reports, |r| r.fallbacks), 0, "locks work on this disk: {reports:?}");
    assert_eq!(s.compiles().len(), 1);
    std::fs::remove_dir_all(&s.dir).unwrap();
}

/// Eight processes, each first-launching the same six kernels in its own order: six compiles.
#[test]
fn eight_processes_in_different_orders_compile_each_kernel_once() {
    let s = setup("orders", "0.1");
    let children = s.start_together(8, |i| {
        let mut salts: Vec<u32> = (600..606).collect();
        salts.rotate_left(i % 6);
        if i % 2 == 1 {
            salts.reverse();
        }
        salts.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
    });
    let reports: Vec<Report> = children.into_iter().map(report).collect();
    assert_eq!(total(&reports, |r| r.builds), 6, "{reports:?}");
    assert_eq!(total(&reports, |r| r.disk_hits), 8 * 6 - 6, "{reports:?}");
    assert_eq!(s.compiles().len(), 6);
    std::fs::remove_dir_all(&s.dir).unwrap();
}

/// Holders killed with SIGKILL at random points of their compiles: each time another process
/// takes the lease over at once; no one waits long, every output is exact, and the cache holds
/// no bad entry.
#[test]
fn holders_killed_at_random_points_hold_no_one_up() {
    const KILLS: usize = 3;
    let s = setup("killed", "0.8");
    let mut children = s.start_together(8, |_| "700".into());
    let mut seed = std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15;
    let mut random_ms = |bound: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % bound
    };
    let started = Instant::now();
    for kill in 0..KILLS {
        while s.compiles().len() <= kill {
            assert!(started.elapsed() < Duration::from_secs(60), "no compile {}", kill + 1);
            std::thread::sleep(Duration::from_millis(2));
        }
        let holder = s.compiles()[kill];
        std::thread::sleep(Duration::from_millis(random_ms(700)));
        let at = children.iter().position(|c| c.id() == holder).expect("a child compiles");
        let mut victim = children.swap_remove(at);
        victim.kill().unwrap();
        victim.wait().unwrap();
    }
    let reports: Vec<Report> = children.into_iter().map(report).collect();
    assert_eq!(s.compiles().len(), KILLS + 1, "one compile per holder, no more");
    assert_eq!(total(&reports, |r| r.builds), 1, "{reports:?}");
    assert_eq!(total(&reports, |r| r.disk_hits), 8 - KILLS as u64 - 1, "{reports:?}");
    assert_eq!(total(&reports, |r| r.timeouts), 0, "{reports:?}");
    // Each process waited for at most the holders' compiles (under 1 s each), never a bound.
    let slowest = reports.iter().map(|r| r.ms).max().unwrap();
    assert!(slowest < 15_000, "a process took {slowest} ms: {reports:?}");
    let check = s.child("check", None).output().unwrap();
    let check = String::from_utf8_lossy(&check.stdout).into_owned();
    assert!(check.contains("CHECK valid=1 invalid=0"), "{check}");
    let entries = std::fs::read_dir(&s.cache)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "jbc"))
        .count();
    assert_eq!(entries, 1);
    let leases = std::fs::read_dir(s.cache.join("leases")).unwrap().count();
    assert!(leases <= KILLS, "{leases} lease files left by {KILLS} killed holders");
    std::fs::remove_dir_all(&s.dir).unwrap();
}

/// A holder stopped (SIGSTOP) in its compile: a waiter gives up at the compile timeout and
/// compiles alone; it never waits longer.
#[test]
fn a_stopped_holder_is_waited_for_no_longer_than_the_compile_timeout() {
    let s = setup("stopped", "0.5");
    let mut holder = s.child("800", None).spawn().unwrap();
    let started = Instant::now();
    while s.compiles().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(60), "the holder never compiled");
        std::thread::sleep(Duration::from_millis(2));
    }
    // SAFETY: a signal to our own child.
    unsafe { kill(holder.id() as i32, 19) }; // SIGSTOP
    let waiter = s.child("800", None).env("JITBRIDGE_COMPILE_TIMEOUT_MS", "3000").spawn().unwrap();
    let r = report(waiter);
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!((r.builds, r.timeouts, r.waits), (1, 1, 0), "{r:?}");
    assert!(r.ms >= 2900, "gave up after {} ms, before the timeout", r.ms);
    assert!(r.ms < 3000 + 5000, "waited {} ms, past the 3000 ms timeout and a compile", r.ms);
    std::fs::remove_dir_all(&s.dir).unwrap();
}

/// What stands at a lease's name that is not a lease file of ours (a FIFO, a link to a file
/// elsewhere, another user's file), or at leases/ that is not a folder (a file, a FIFO, a link
/// to a folder elsewhere), is removed, never waited on nor written through, and the lease is
/// taken as usual.
#[test]
fn junk_at_a_lease_name_neither_blocks_nor_is_written_through() {
    let s = setup("junk", "0");
    let manifest = s.dir.join("learn.manifest");
    let mut learn = s.child("900", None);
    learn.env("JITBRIDGE_CACHE_DIR", s.dir.join("other")).env("JITBRIDGE_MANIFEST", &manifest);
    let output = learn.output().unwrap();
    assert!(output.status.success());
    let text = std::fs::read_to_string(&manifest).unwrap();
    let key = text.split('\t').nth(1).unwrap()[..32].to_string();
    let victim = s.dir.join("victim");
    std::fs::write(&victim, b"untouched").unwrap();
    let victim_folder = s.dir.join("victim-folder");
    std::fs::create_dir(&victim_folder).unwrap();
    let mut kinds =
        vec!["fifo", "link", "a file at leases/", "a FIFO at leases/", "a link at leases/"];
    if common_is_root() {
        kinds.push("theirs");
    }
    for kind in kinds {
        // The library makes the folder (and marks it as its own: only there does it remove).
        let _ = std::fs::remove_dir_all(&s.cache);
        report(s.child("901", None).spawn().unwrap());
        let leases = s.cache.join("leases");
        assert!(leases.is_dir(), "the first process made no leases/");
        let name = leases.join(format!("{key}.lease"));
        match kind {
            "a file at leases/" => {
                std::fs::remove_dir(&leases).unwrap();
                std::fs::write(&leases, b"junk").unwrap();
            }
            "a FIFO at leases/" => {
                std::fs::remove_dir(&leases).unwrap();
                make_fifo(&leases);
            }
            "a link at leases/" => {
                std::fs::remove_dir(&leases).unwrap();
                std::os::unix::fs::symlink(&victim_folder, &leases).unwrap();
            }
            "fifo" => make_fifo(&name),
            "link" => std::os::unix::fs::symlink(&victim, &name).unwrap(),
            _ => {
                std::fs::write(&name, b"").unwrap();
                std::os::unix::fs::chown(&name, Some(65534), Some(65534)).unwrap();
            }
        }
        let r = report_output(common::finish(s.child("900", None), Duration::from_secs(30)));
        assert_eq!(r.builds, 1, "{kind}: {r:?}");
        assert_eq!(r.fallbacks, 0, "{kind}: compiled without its lease: {r:?}");
        assert!(
            std::fs::symlink_metadata(&leases).unwrap().is_dir(),
            "{kind}: leases/ was not made again"
        );
        assert!(!name.exists() && std::fs::symlink_metadata(&name).is_err(), "{kind} stays");
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"untouched");
    assert_eq!(std::fs::read_dir(&victim_folder).unwrap().count(), 0, "written through a link");
    // In a folder not marked as the cache's own (a file of someone else's in it), nothing is
    // removed: the process compiles without a lease, and says so.
    let _ = std::fs::remove_dir_all(&s.cache);
    report(s.child("901", None).spawn().unwrap());
    std::fs::remove_file(s.cache.join("CACHEDIR.TAG")).unwrap();
    std::fs::write(s.cache.join("notes.txt"), b"not the cache's").unwrap();
    let leases = s.cache.join("leases");
    std::fs::remove_dir(&leases).unwrap();
    std::fs::write(&leases, b"junk").unwrap();
    let output = common::finish(s.child("900", None), Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let r = report_output(output);
    assert_eq!((r.builds, r.fallbacks), (1, 1), "{r:?}");
    assert!(stderr.contains("leases between processes are off"), "no warning: {stderr}");
    assert_eq!(std::fs::read(&leases).unwrap(), b"junk", "removed from a folder not ours");
    std::fs::remove_dir_all(&s.dir).unwrap();
}

/// A kernel that does not compile: the processes that waited for the holder's failed compile
/// compile it side by side (each must see the compiler's error for itself), not one after
/// another behind the lease, each waiting for the last: N processes take one compile's time,
/// not N (a fleet of replicas starting with a broken kernel stalled for N compiles).
#[test]
fn processes_waiting_for_a_failed_compile_compile_side_by_side() {
    use std::os::unix::fs::PermissionsExt;
    let s = setup("failing", "0");
    // The first compile waits while hold1 exists, every later one while hold2 does.
    let gcc = Command::new("sh").args(["-c", "command -v gcc"]).output().unwrap();
    let gcc = String::from_utf8(gcc.stdout).unwrap().trim().to_string();
    let (hold1, hold2) = (s.dir.join("hold1"), s.dir.join("hold2"));
    let script = format!(
        "#!/bin/sh\n[ \"$1\" = --version ] && exec {gcc} \"$@\"\n\
         cut -d' ' -f4 /proc/$PPID/stat >> {marks}\n\
         hold={hold2}; [ $(wc -l < {marks}) -eq 1 ] && hold={hold1}\n\
         while [ -e $hold ]; do sleep 0.01; done\nexec {gcc} \"$@\"\n",
        marks = s.marks.display(),
        hold1 = hold1.display(),
        hold2 = hold2.display()
    );
    std::fs::write(&s.compiler, script).unwrap();
    std::fs::set_permissions(&s.compiler, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(&hold1, b"").unwrap();
    std::fs::write(&hold2, b"").unwrap();
    let wait_for_compiles = |n: usize, seconds: u64| {
        let started = Instant::now();
        while s.compiles().len() < n && started.elapsed() < Duration::from_secs(seconds) {
            std::thread::sleep(Duration::from_millis(5));
        }
        s.compiles().len()
    };
    let mut children = vec![s.child("fail", None).spawn().unwrap()];
    assert_eq!(wait_for_compiles(1, 60), 1, "the holder never compiled");
    for _ in 0..2 {
        children.push(s.child("fail", None).spawn().unwrap());
    }
    std::thread::sleep(Duration::from_millis(300)); // the two are likely waiting for the lease
    std::fs::remove_file(&hold1).unwrap(); // the holder's compile fails
    let side_by_side = wait_for_compiles(3, 20);
    std::fs::remove_file(&hold2).unwrap();
    for child in children {
        let output = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(stdout.contains("FAILED compile=true"), "not a compile error: {stdout}");
    }
    assert_eq!(
        side_by_side, 3,
        "after the holder's failure, its two waiters compiled one at a time"
    );
    std::fs::remove_dir_all(&s.dir).unwrap();
}

fn make_fifo(path: &Path) {
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { mkfifo(c_path.as_ptr(), 0o600) }, 0);
}

fn common_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { geteuid() == 0 }
}

unsafe extern "C" {
    fn kill(pid: i32, signal: i32) -> i32;
    fn mkfifo(path: *const std::ffi::c_char, mode: u32) -> i32;
    fn geteuid() -> u32;
}
