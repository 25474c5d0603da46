//! The disk cache, seen from new processes: each test re-runs this test binary as a child (the
//! `child_entry` test, inert unless JB_DISK_TEST_CHILD is set) with its own cache folder.

mod common;

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
    CustomKernel::new(&KernelSpec {
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
        let out = salted_kernel(salt).launch(&[input], &[&[64]], LaunchShape::Threads(64));
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
        kernel.launch(&[input], &[&[64]], LaunchShape::Threads(64)).map(|_| ())
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

#[test]
fn a_second_process_loads_from_disk_without_compiling() {
    let dir = fresh_dir("second");
    let first = run_child(&dir, "1");
    assert_eq!((first.builds, first.disk_hits, first.disk_misses), (1, 0, 1));
    assert_eq!(entries(&dir).len(), 1);
    let second = run_child(&dir, "1");
    assert_eq!((second.builds, second.disk_hits), (0, 1), "the compiler ran again");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Breaks the one entry in `dir` in some way; the next process must rebuild and replace it.
fn damaged_entry_is_rebuilt(name: &str, damage: impl Fn(&Path, &Path)) {
    let dir = fresh_dir(name);
    run_child(&dir, "2");
    let entry = entries(&dir).pop().unwrap();
    damage(&dir, &entry);
    let rebuilt = run_child(&dir, "2");
    assert_eq!((rebuilt.builds, rebuilt.disk_hits, rebuilt.disk_rejected), (1, 0, 1), "{name}");
    let again = run_child(&dir, "2");
    assert_eq!((again.builds, again.disk_hits), (0, 1), "{name}: the entry was not replaced");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn truncated_entry_is_rebuilt() {
    damaged_entry_is_rebuilt("truncated", |_, entry| {
        let bytes = std::fs::read(entry).unwrap();
        std::fs::write(entry, &bytes[..bytes.len() / 2]).unwrap();
    });
}

#[test]
fn bit_flipped_entry_is_rebuilt() {
    damaged_entry_is_rebuilt("flipped", |_, entry| {
        let mut bytes = std::fs::read(entry).unwrap();
        let last = bytes.len() - 100;
        bytes[last] ^= 0x10;
        std::fs::write(entry, bytes).unwrap();
    });
}

#[test]
fn wrong_version_entry_is_rebuilt() {
    damaged_entry_is_rebuilt("version", |_, entry| {
        let mut bytes = std::fs::read(entry).unwrap();
        bytes[8] = bytes[8].wrapping_add(1); // the format version follows the 8-byte magic
        std::fs::write(entry, bytes).unwrap();
    });
}

#[test]
fn entry_of_another_key_is_rebuilt() {
    damaged_entry_is_rebuilt("wrongkey", |dir, entry| {
        // A well-formed entry of another kernel, under this kernel's file name.
        let other = fresh_dir("wrongkey-other");
        run_child(&other, "3");
        std::fs::copy(entries(&other).pop().unwrap(), entry).unwrap();
        std::fs::remove_dir_all(&other).unwrap();
        assert_eq!(entries(dir).len(), 1);
    });
}

#[test]
fn eight_processes_first_launching_together_leave_valid_entries() {
    let dir = fresh_dir("eight");
    let children: Vec<_> =
        (0..8).map(|_| child_command(&dir, "10,11,12").spawn().unwrap()).collect();
    let children: Vec<_> = children.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
    for output in children {
        parse(output); // asserts success and exact outputs
    }
    assert_eq!(entries(&dir).len(), 3, "one entry per kernel");
    // Every entry is whole: the next process loads each without compiling.
    let after = run_child(&dir, "10,11,12");
    assert_eq!((after.builds, after.disk_hits), (0, 3), "an entry was torn or invalid");
    let leftovers = std::fs::read_dir(dir.join("tmp")).unwrap().count();
    assert_eq!(leftovers, 0, "temporary files were left behind");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn probes_never_use_the_disk_cache() {
    let dir = fresh_dir("probe");
    let report = run_child(&dir, "probe");
    assert_eq!((report.builds, report.disk_misses), (1, 0));
    assert!(entries(&dir).is_empty());
    let _ = std::fs::remove_dir_all(&dir); // never even created: the probe did not look
}

#[test]
fn stale_temporaries_are_swept_and_fresh_ones_kept() {
    let dir = fresh_dir("sweep");
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    let stale = dir.join("tmp/killed-writer.tmp");
    let fresh = dir.join("tmp/live-writer.tmp");
    std::fs::write(&stale, b"half an entry").unwrap();
    std::fs::write(&fresh, b"half an entry").unwrap();
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    std::fs::File::options().write(true).open(&stale).unwrap().set_modified(two_hours_ago).unwrap();
    run_child(&dir, "13");
    assert!(!stale.exists(), "a temporary left by a killed writer was not swept");
    assert!(fresh.exists(), "a temporary a live writer may own was removed");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn disk_cache_off_by_environment() {
    let dir = fresh_dir("off");
    let report = parse(child_command(&dir, "4").env("JITBRIDGE_DISK_CACHE", "0").output().unwrap());
    assert_eq!((report.builds, report.disk_misses), (1, 0));
    assert!(!dir.exists(), "the folder was created although the cache is off");
}

#[test]
fn group_writable_folder_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = fresh_dir("groupw");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).unwrap();
    let report = run_child(&dir, "5");
    assert!(report.stderr.contains("writable by group or others"), "{}", report.stderr);
    assert_eq!(report.stderr.matches("warning").count(), 1, "one warning: {}", report.stderr);
    assert!(entries(&dir).is_empty(), "nothing is written to a refused folder");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Root ignores permissions, so ownership is changed with chown (root may); as another user the
/// root-owned folder "/" serves as the foreign one.
#[test]
fn folder_owned_by_another_user_is_refused() {
    let dir = fresh_dir("foreign");
    let target = if is_root() {
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        dir.clone()
    } else {
        PathBuf::from("/")
    };
    let report = run_child(&target, "6");
    assert!(report.stderr.contains("owned by another user"), "{}", report.stderr);
    assert_eq!(report.builds, 1, "the kernel still ran");
    assert!(entries(&target).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// An unwritable folder: as root, the child drops to uid 65534, which owns a 0500 folder.
#[test]
fn unwritable_folder_warns_and_the_kernel_still_runs() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !is_root() {
        eprintln!("skipped: running a child as another user needs root");
        return;
    }
    let base = fresh_dir("readonly");
    let dir = base.join("cache");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    for d in [&dir.join("tmp"), &dir] {
        std::os::unix::fs::chown(d, Some(65534), Some(65534)).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o500)).unwrap();
    }
    let mut cmd = child_command(&dir, "7");
    cmd.uid(65534).gid(65534).env("TMPDIR", "/tmp");
    let output = match cmd.output() {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            eprintln!("skipped: uid 65534 cannot reach this test binary ({e})");
            let _ = std::fs::remove_dir_all(&base);
            return;
        }
        other => other.unwrap(),
    };
    let report = parse(output);
    assert!(report.stderr.contains("cannot write"), "{}", report.stderr);
    assert_eq!(report.builds, 1, "the kernel still ran");
    let _ = std::fs::remove_dir_all(&base);
}

/// A full disk, by injected fault: JITBRIDGE_DISK_CACHE_FAULT=enospc fails every cache write
/// with ENOSPC (a real full filesystem needs a mount this test cannot make).
#[test]
fn full_disk_warns_once_and_kernels_still_run() {
    let dir = fresh_dir("full");
    let report = parse(
        child_command(&dir, "8,9").env("JITBRIDGE_DISK_CACHE_FAULT", "enospc").output().unwrap(),
    );
    assert!(report.stderr.contains("No space left on device"), "{}", report.stderr);
    assert_eq!(report.stderr.matches("warning").count(), 1, "one warning: {}", report.stderr);
    assert_eq!(report.builds, 2, "both kernels ran");
    assert!(entries(&dir).is_empty());
    assert_eq!(std::fs::read_dir(dir.join("tmp")).unwrap().count(), 0, "no torn temporaries");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A cache cleaner removing tmp/ between an entry's write and its rename, by injected fault
/// (JITBRIDGE_DISK_CACHE_FAULT=remove-tmp): the entry is written again, not given up with a
/// warning that stops storing for the rest of the process.
#[test]
fn tmp_removed_during_a_write_stores_on() {
    let dir = fresh_dir("removed-mid-write");
    let report = parse(
        child_command(&dir, "98,99")
            .env("JITBRIDGE_DISK_CACHE_FAULT", "remove-tmp")
            .output()
            .unwrap(),
    );
    assert!(!report.stderr.contains("warning"), "{}", report.stderr);
    assert_eq!(report.builds, 2);
    assert_eq!(entries(&dir).len(), 2, "not stored");
    assert_eq!(run_child(&dir, "98,99").disk_hits, 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_off_spelling_turns_the_cache_off() {
    for value in ["0", "false", "OFF", "No", "off"] {
        let dir = fresh_dir("offword");
        let report =
            parse(child_command(&dir, "4").env("JITBRIDGE_DISK_CACHE", value).output().unwrap());
        assert_eq!((report.builds, report.disk_misses), (1, 0), "JITBRIDGE_DISK_CACHE={value}");
        assert!(!dir.exists(), "JITBRIDGE_DISK_CACHE={value} still created the folder");
    }
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

/// A FIFO where an entry belongs used to block open() forever, under the module cache's write
/// lock. Now it is refused on its handle, removed, and the rebuilt entry takes its place.
#[test]
fn fifo_entry_neither_blocks_nor_turns_the_cache_off() {
    use std::os::unix::fs::FileTypeExt;
    let (name, _) = entry_name(30);
    let dir = fresh_dir("fifo");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    make_fifo(&dir.join(&name));
    let start = Instant::now();
    let mut child = child_command(&dir, "30").spawn().unwrap();
    while child.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let elapsed = start.elapsed();
    if child.try_wait().unwrap().is_none() {
        child.kill().unwrap();
        child.wait().unwrap();
        panic!("the process blocked on a FIFO entry for {elapsed:?}");
    }
    let report = parse(child.wait_with_output().unwrap());
    // The launch that met the FIFO, not the process: a GPU build enumerates devices at start.
    eprintln!("a process meeting a FIFO entry: {elapsed:?}, its launch {} ms", report.launch_ms);
    assert!(report.launch_ms < 1000.0, "the launch took {} ms", report.launch_ms);
    assert_eq!((report.builds, report.disk_rejected), (1, 1));
    assert!(!report.stderr.contains("warning"), "{}", report.stderr);
    let kind = std::fs::symlink_metadata(dir.join(&name)).unwrap().file_type();
    assert!(kind.is_file() && !kind.is_fifo(), "the FIFO is still there");
    assert_eq!((run_child(&dir, "30").disk_hits), 1, "the rebuilt entry was not stored");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A directory (not empty, so it cannot be removed) where an entry belongs is stepped around:
/// no warning, and the cache stays on for the next kernel.
#[test]
fn directory_at_an_entry_name_is_stepped_around() {
    let (name, _) = entry_name(31);
    let dir = fresh_dir("dirent");
    std::fs::create_dir_all(dir.join(&name).join("inside")).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let report = run_child(&dir, "31,32");
    assert_eq!(report.builds, 2);
    assert!(!report.stderr.contains("warning"), "{}", report.stderr);
    let stored: Vec<_> = entries(&dir).into_iter().filter(|p| p.is_file()).collect();
    assert_eq!(stored.len(), 1, "the next kernel's entry was not stored: {stored:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn entry_with_a_second_link_is_rebuilt() {
    damaged_entry_is_rebuilt("hardlink", |dir, entry| {
        std::fs::hard_link(entry, dir.join("another-name")).unwrap();
    });
}

#[test]
fn entry_writable_by_others_is_rebuilt() {
    use std::os::unix::fs::PermissionsExt;
    damaged_entry_is_rebuilt("entry-mode", |_, entry| {
        std::fs::set_permissions(entry, std::fs::Permissions::from_mode(0o666)).unwrap();
    });
}

#[test]
fn entry_owned_by_another_user_is_rebuilt() {
    if !is_root() {
        eprintln!("skipped: giving a file to another user needs root");
        return;
    }
    damaged_entry_is_rebuilt("entry-owner", |_, entry| {
        std::os::unix::fs::chown(entry, Some(65534), Some(65534)).unwrap();
    });
}

/// Temporary names used to be `<entry>.<pid>.<serial>.tmp`: a leftover of a killed process
/// with the same PID (another container's) turned the cache off. Names are random now.
#[test]
fn a_leftover_temporary_of_the_same_pid_does_not_turn_the_cache_off() {
    let (name, _) = entry_name(40);
    let dir = fresh_dir("samepid");
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    let go = dir.join("go");
    let child = child_command(&dir, "40").env(GO, &go).spawn().unwrap();
    wait_for(&dir.join("go.ready"));
    std::fs::write(dir.join(format!("tmp/{name}.{}.0.tmp", child.id())), b"left behind").unwrap();
    std::fs::write(&go, b"").unwrap();
    let report = parse(child.wait_with_output().unwrap());
    assert!(!report.stderr.contains("warning"), "{}", report.stderr);
    assert!(dir.join(&name).is_file(), "the entry was not stored");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A relative XDG_CACHE_HOME is ignored, as the XDG spec says: the cache goes under HOME.
#[test]
fn relative_xdg_cache_home_is_ignored() {
    let base = fresh_dir("xdg");
    let (home, work) = (base.join("home"), base.join("work"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let mut cmd = child_command(&base, "41");
    cmd.env_remove("JITBRIDGE_CACHE_DIR").env("XDG_CACHE_HOME", "relative").env("HOME", &home);
    parse(cmd.current_dir(&work).output().unwrap());
    assert!(!work.join("relative").exists(), "a relative XDG_CACHE_HOME was used");
    assert_eq!(entries(&home.join(".cache/jitbridge")).len(), 1);
    std::fs::remove_dir_all(&base).unwrap();
}

const FNV_SEED: u64 = 0xcbf29ce484222325;

fn fnv1a64(data: &[u8], seed: u64) -> u64 {
    data.iter().fold(seed, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3))
}

/// What an attacker plants: a genuine entry's header and key (keys are not secret: they run the
/// same kernel) around their own payload, with the checksum recomputed (it is not keyed).
fn forge_entry(genuine: &[u8], payload: &[u8]) -> Vec<u8> {
    let key_bytes = u32::from_le_bytes(genuine[12..16].try_into().unwrap()) as usize;
    let key = &genuine[32..32 + key_bytes];
    let mut forged = genuine[..16].to_vec();
    forged.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    forged.extend_from_slice(&fnv1a64(payload, fnv1a64(key, FNV_SEED)).to_le_bytes());
    forged.extend_from_slice(key);
    forged.extend_from_slice(payload);
    forged
}

/// A shared object whose constructor writes `marker`: loading it is running the attacker's code.
fn planted_shared_object(dir: &Path, marker: &Path) -> Vec<u8> {
    let source = dir.join("planted.c");
    std::fs::write(
        &source,
        format!(
            "#include <stdio.h>\n__attribute__((constructor)) static void planted(void) {{\n\
             FILE *f = fopen(\"{}\", \"w\"); if (f) {{ fputs(\"ran\", f); fclose(f); }} }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let object = dir.join("planted.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&object)
        .arg(&source)
        .status()
        .unwrap();
    assert!(status.success(), "cannot build the planted shared object");
    std::fs::read(object).unwrap()
}

enum Swap {
    /// The folder's parent is ours; the folder is swapped after setup. The held handle wins.
    AfterSetup,
    /// The folder sits under another user's (nobody's) folder, who swaps it.
    ForeignParent,
    /// HOME points into another user's home (as with `sudo -E`).
    ForeignHome,
    /// A relative JITBRIDGE_CACHE_DIR, and the host changes directory before its first compile.
    RelativeThenChdir,
}

/// The swap attack: after the library has chosen (and checked) its folder, whoever controls a
/// parent puts a folder of their own in its place with a forged entry for the next kernel. The
/// forged entry's shared object writes a marker when loaded; it must never be written.
fn swap_attack(name: &str, swap: Swap) {
    use std::os::unix::fs::PermissionsExt;
    let base = fresh_dir(name);
    let attacker = base.join("attacker");
    std::fs::create_dir_all(&attacker).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let marker = attacker.join("marker");
    let (entry, genuine) = entry_name(51);
    let forged = forge_entry(&genuine, &planted_shared_object(&attacker, &marker));
    let cache = match swap {
        Swap::ForeignHome => base.join(".cache/jitbridge"),
        _ => base.join("cache"),
    };
    if matches!(swap, Swap::ForeignParent | Swap::ForeignHome) {
        std::os::unix::fs::chown(&base, Some(65534), Some(65534)).unwrap();
    }
    let go = attacker.join("go");
    let mut cmd = child_command(&cache, "51");
    cmd.env(FIRST, "50").env(GO, &go);
    match swap {
        Swap::ForeignHome => {
            cmd.env_remove("JITBRIDGE_CACHE_DIR").env_remove("XDG_CACHE_HOME").env("HOME", &base);
        }
        Swap::RelativeThenChdir => {
            cmd.env("JITBRIDGE_CACHE_DIR", "cache").current_dir(&base).env(CHDIR, &attacker);
        }
        _ => {}
    }
    let child = cmd.spawn().unwrap();
    wait_for(&attacker.join("go.ready"));
    let planted = match swap {
        Swap::RelativeThenChdir => attacker.join("cache"),
        _ => {
            if cache.exists() {
                std::fs::rename(&cache, base.join("moved-away")).unwrap();
            }
            cache.clone()
        }
    };
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(planted.join(&entry), &forged).unwrap();
    std::fs::set_permissions(planted.join(&entry), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&go, b"").unwrap();
    let report = parse(child.wait_with_output().unwrap());
    assert!(!marker.exists(), "{name}: the planted shared object ran\n{}", report.stderr);
    if matches!(swap, Swap::ForeignParent | Swap::ForeignHome) {
        assert!(report.stderr.contains("refusing the cache folder"), "{}", report.stderr);
        assert!(report.stderr.contains(base.to_str().unwrap()), "{}", report.stderr);
        assert!(report.stderr.contains("owned by another user"), "{}", report.stderr);
        assert!(report.stderr.contains("fix: "), "{}", report.stderr);
    } else {
        assert_eq!(report.disk_hits, 0, "{name}: a planted entry was loaded");
    }
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn swap_after_setup_loads_nothing_planted() {
    swap_attack("swap-held", Swap::AfterSetup);
}

#[test]
fn relative_cache_dir_then_chdir_loads_nothing_planted() {
    swap_attack("swap-relative", Swap::RelativeThenChdir);
}

#[test]
fn folder_under_another_users_folder_is_refused() {
    if !is_root() {
        eprintln!("skipped: a folder of another user needs root to make");
        return;
    }
    swap_attack("swap-foreign", Swap::ForeignParent);
}

#[test]
fn home_of_another_user_is_refused() {
    if !is_root() {
        eprintln!("skipped: a home of another user needs root to make");
        return;
    }
    swap_attack("swap-home", Swap::ForeignHome);
}

#[test]
fn showing_the_cache_creates_nothing() {
    let dir = fresh_dir("show");
    let (outcome, _) = run_admin(&mut child_command(&dir, "admin:show"));
    let text = outcome.unwrap();
    assert!(text.contains("entries=0 bytes=0"), "{text}");
    assert!(text.contains(&format!("dir={}", dir.display())), "{text}");
    assert!(!dir.exists(), "looking at the cache created its folder");
}

/// As root, clearing used to delete the entries of a folder the library itself refuses.
#[test]
fn clearing_a_refused_folder_is_an_error_and_removes_nothing() {
    if !is_root() {
        eprintln!("skipped: a folder of another user needs root to make");
        return;
    }
    let dir = fresh_dir("clear-foreign");
    run_child(&dir, "60");
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    let (outcome, _) = run_admin(&mut child_command(&dir, "admin:clear"));
    let message = outcome.unwrap_err();
    assert!(message.contains(dir.to_str().unwrap()), "{message}");
    assert!(message.contains("owned by another user") && message.contains("fix: "), "{message}");
    assert_eq!(entries(&dir).len(), 1, "an entry of a refused folder was removed");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Clearing a folder whose entries cannot be removed used to say "removed 0 entries" and
/// succeed. As root, the child drops to uid 65534, which owns a 0500 folder.
#[test]
fn clearing_a_read_only_folder_is_an_error() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !is_root() {
        eprintln!("skipped: running a child as another user needs root");
        return;
    }
    let base = fresh_dir("clear-readonly");
    let dir = base.join("cache");
    run_child(&dir, "61");
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    for path in [entries(&dir).pop().unwrap(), dir.join("tmp"), dir.clone()] {
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o500)).unwrap();
    let mut cmd = child_command(&dir, "admin:clear");
    cmd.uid(65534).gid(65534);
    let (outcome, _) = run_admin(&mut cmd);
    let message = outcome.unwrap_err();
    assert!(
        message.contains("cannot remove") && message.contains("Permission denied"),
        "{message}"
    );
    assert_eq!(entries(&dir).len(), 1);
    std::fs::remove_dir_all(&base).unwrap();
}

/// `check` names every entry the library would refuse or reject, and `fix` removes exactly
/// those; the good entry stays.
#[test]
fn check_names_each_bad_entry_and_fix_removes_them() {
    use std::os::unix::fs::PermissionsExt;
    let dir = fresh_dir("check");
    run_child(&dir, "70,71,72,73");
    let good = entries(&dir);
    let name = |p: &PathBuf| p.file_name().unwrap().to_str().unwrap().to_string();
    std::fs::set_permissions(&good[0], std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::hard_link(&good[1], dir.join("second-link")).unwrap();
    let mut bytes = std::fs::read(&good[2]).unwrap();
    bytes[40] ^= 1;
    std::fs::write(&good[2], bytes).unwrap();
    let fifo = dir.join("0123456789abcdef0123456789abcdef.jbc");
    make_fifo(&fifo);
    std::os::unix::fs::symlink(&good[3], dir.join("ffffffffffffffffffffffffffffffff.jbc")).unwrap();
    let (outcome, problems) = run_admin(&mut child_command(&dir, "admin:check"));
    assert_eq!(outcome.unwrap(), "valid=1 invalid=5");
    let expected = [
        (name(&good[0]), "is writable by group or others"),
        (name(&good[1]), "has more than one link"),
        (name(&good[2]), "is malformed"),
        (name(&fifo), "is a FIFO"),
        ("ffffffffffffffffffffffffffffffff.jbc".to_string(), "is a symbolic link"),
    ];
    for (entry, problem) in &expected {
        assert!(
            problems.iter().any(|p| p.starts_with(entry.as_str()) && p.contains(problem)),
            "{entry} {problem} not reported in {problems:?}"
        );
    }
    assert_eq!(entries(&dir).len(), 6, "check alone removed something");
    let (outcome, _) = run_admin(&mut child_command(&dir, "admin:fix"));
    assert_eq!(outcome.unwrap(), "valid=1 invalid=5");
    assert_eq!(entries(&dir), vec![good[3].clone()], "fix left a bad entry or removed a good one");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// This process (like every test process) was pointed at a temporary folder before `main`.
#[test]
fn tests_use_a_temporary_cache_folder() {
    let dir = PathBuf::from(jitbridge::disk_cache::dir());
    let own = std::env::temp_dir().join(format!("jitbridge-test-cache-{}", std::process::id()));
    assert_eq!(dir, own, "tests would write the user's cache folder");
}

/// A parent that anyone may write (no sticky bit) lets anyone swap the folder: refused, with
/// the parent and the fix named. (/tmp itself, sticky, is fine: every test here lives under it.)
#[test]
fn folder_under_a_world_writable_parent_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let base = fresh_dir("worldw");
    std::fs::create_dir_all(&base).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
    let dir = base.join("cache");
    let report = run_child(&dir, "80");
    let says =
        format!("its parent {} is writable by others without the sticky bit", base.display());
    assert!(report.stderr.contains(&says), "{}", report.stderr);
    assert!(
        report.stderr.contains(&format!("fix: chmod o-w {}", base.display())),
        "{}",
        report.stderr
    );
    assert_eq!(report.builds, 1, "the kernel still ran");
    assert!(entries(&dir).is_empty());
    std::fs::remove_dir_all(&base).unwrap();
}

/// A symbolic link to an acceptable folder is followed (it used to be refused outright); one to
/// a folder the library would refuse is refused.
#[test]
fn a_link_is_followed_only_to_an_acceptable_folder() {
    use std::os::unix::fs::PermissionsExt;
    let base = fresh_dir("link");
    let (good, bad) = (base.join("good"), base.join("bad"));
    std::fs::create_dir_all(&good).unwrap();
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::fs::symlink(&good, base.join("to-good")).unwrap();
    std::os::unix::fs::symlink(&bad, base.join("to-bad")).unwrap();
    let followed = run_child(&base.join("to-good"), "81");
    assert!(!followed.stderr.contains("warning"), "{}", followed.stderr);
    assert_eq!(entries(&good).len(), 1, "the entry did not land in the link's target");
    let refused = run_child(&base.join("to-bad"), "81");
    assert!(refused.stderr.contains("writable by group or others"), "{}", refused.stderr);
    assert!(entries(&bad).is_empty());
    std::fs::remove_dir_all(&base).unwrap();
}

/// `clear` sees what is not an entry at an entry's name (a FIFO, an empty directory, a link)
/// and removes it with the entries.
#[test]
fn clear_removes_fifos_links_and_directories_at_entry_names() {
    let dir = fresh_dir("clear-junk");
    run_child(&dir, "82");
    make_fifo(&dir.join("0123456789abcdef0123456789abcdef.jbc"));
    std::fs::create_dir(dir.join("1123456789abcdef0123456789abcdef.jbc")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.join("2123456789abcdef0123456789abcdef.jbc"))
        .unwrap();
    assert_eq!(entries(&dir).len(), 4);
    let (outcome, _) = run_admin(&mut child_command(&dir, "admin:clear"));
    assert_eq!(outcome.unwrap(), "removed=4");
    assert!(entries(&dir).is_empty(), "{:?}", entries(&dir));
    assert!(Path::new("/etc/passwd").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The cpu backend compiles and dlopens in a private folder under TMPDIR, by path. When TMPDIR
/// sits in a folder another user controls (`sudo -E` keeps it), that user swaps the private
/// folder for one of their own and rewrites each kernel source before the compiler reads it:
/// their constructor ran as root. Such a TMPDIR is refused now, naming the folder and the fix.
#[test]
fn private_folder_under_another_users_tmpdir_runs_nothing_planted() {
    use std::os::unix::fs::PermissionsExt;
    if !is_root() {
        eprintln!("skipped: a folder of another user needs root to make");
        return;
    }
    let base = fresh_dir("tmpdir-swap");
    let tmpdir = base.join("tmp");
    std::fs::create_dir_all(&tmpdir).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&tmpdir, Some(65534), Some(65534)).unwrap();
    let marker = base.join("marker");
    let evil = format!(
        "#include <stdio.h>\n__attribute__((constructor)) static void planted(void) {{\n\
         FILE *f = fopen(\"{}\", \"w\"); if (f) {{ fputs(\"ran\", f); fclose(f); }} }}\n",
        marker.display()
    );
    let go = base.join("go");
    let mut cmd = child_command(&base.join("cache"), "try:81");
    let child = cmd.env(FIRST, "80").env(GO, &go).env("TMPDIR", &tmpdir).spawn().unwrap();
    let ready = base.join("go.ready");
    let start = Instant::now();
    while !ready.exists() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(5));
    }
    // The attacker (owner of TMPDIR) swaps the private folder for one of their own.
    let private = std::fs::read_dir(&tmpdir).unwrap().filter_map(|e| e.ok()).map(|e| e.path());
    let private: Vec<PathBuf> =
        private.filter(|p| p.to_string_lossy().contains("jitbridge-")).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut rewriter = None;
    if let [private] = &private[..] {
        std::fs::rename(private, tmpdir.join("moved-away")).unwrap();
        std::fs::create_dir(private).unwrap();
        std::fs::set_permissions(private, std::fs::Permissions::from_mode(0o777)).unwrap();
        let (private, stop, evil) = (private.clone(), stop.clone(), evil.clone());
        rewriter = Some(std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for entry in std::fs::read_dir(&private).into_iter().flatten().flatten() {
                    let path = entry.path();
                    let name = path.file_name().unwrap().to_string_lossy().into_owned();
                    if name.starts_with("kernel-") && name.ends_with(".c") {
                        let staged = private.join("staged");
                        std::fs::write(&staged, &evil).unwrap();
                        let _ = std::fs::rename(&staged, &path);
                    }
                }
            }
        }));
    }
    std::fs::write(&go, b"").unwrap();
    let output = child.wait_with_output().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(rewriter) = rewriter {
        rewriter.join().unwrap();
    }
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!marker.exists(), "the attacker's code ran in the root process\n{stdout}\n{stderr}");
    assert!(stdout.contains(tmpdir.to_str().unwrap()), "{stdout}\n{stderr}");
    assert!(stdout.contains("owned by another user"), "{stdout}");
    assert!(stdout.contains("fix: choose a folder of your own with TMPDIR"), "{stdout}");
    std::fs::remove_dir_all(&base).unwrap();
}

/// A cache folder that can no longer be written (a read-only mount, a full disk, a warmed cache
/// shipped read-only) still serves the entries it has. A failed store used to turn the whole
/// cache off, so every later kernel of a months-long process compiled again.
#[test]
fn read_only_folder_still_serves_its_entries() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !is_root() {
        eprintln!("skipped: running a child as another user needs root");
        return;
    }
    let base = fresh_dir("readonly-hits");
    let dir = base.join("cache");
    for without_tmp in [false, true] {
        run_child(&dir, "92");
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        if without_tmp {
            std::fs::remove_dir(dir.join("tmp")).unwrap();
        }
        for path in entries(&dir).into_iter().chain([dir.join("tmp"), dir.clone()]) {
            let _ = std::os::unix::fs::chown(&path, Some(65534), Some(65534));
        }
        let _ = std::fs::set_permissions(dir.join("tmp"), std::fs::Permissions::from_mode(0o500));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o500)).unwrap();
        let mut cmd = child_command(&dir, "93,92");
        let report = parse(cmd.uid(65534).gid(65534).env("TMPDIR", "/tmp").output().unwrap());
        assert_eq!(report.disk_hits, 1, "without tmp/: {without_tmp}\n{}", report.stderr);
        assert_eq!(report.builds, 1, "without tmp/: {without_tmp}");
        assert_eq!(report.stderr.matches("warning").count(), 1, "{}", report.stderr);
        std::fs::remove_dir_all(&base).unwrap();
    }
}

/// A setuid-nobody copy of this test binary at base/host, or None (with why) where setuid does
/// not take effect here (a nosuid mount, no_new_privs).
fn setuid_copy(base: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let host = base.join("host");
    std::fs::copy(std::env::current_exe().unwrap(), &host).unwrap();
    std::os::unix::fs::chown(&host, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o4755)).unwrap();
    // Another test thread that forks while the copy is open for writing holds that descriptor
    // until its child execs: until then running the copy fails with "Text file busy".
    let output = (0..200)
        .map(|_| child_command_of(&host, &base.join("cache"), "euid").output())
        .find(|run| match run {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(10));
                false
            }
            _ => true,
        })
        .expect("the copy stayed busy for 2 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    if stdout.contains("EUID 65534") {
        return Some(host);
    }
    eprintln!("skipped: setuid does not take effect here ({stdout})");
    None
}

/// A setuid host must not take file locations from its caller: JITBRIDGE_SAVE_SOURCE used to be
/// read with getenv, so the caller had the elevated process write (O_TRUNC) into any folder.
/// As root, a setuid-nobody copy of this test is the elevated host (AT_SECURE is set).
#[test]
fn setuid_host_takes_no_save_folder_from_its_caller() {
    use std::os::unix::fs::PermissionsExt;
    if !is_root() {
        eprintln!("skipped: a setuid copy needs root to make");
        return;
    }
    let base = fresh_dir("setuid");
    let saved = base.join("saved");
    std::fs::create_dir_all(&saved).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&saved, std::fs::Permissions::from_mode(0o777)).unwrap();
    let Some(host) = setuid_copy(&base) else {
        return std::fs::remove_dir_all(&base).unwrap();
    };
    let mut cmd = child_command_of(&host, &base.join("cache"), "94");
    let output = cmd.env("JITBRIDGE_SAVE_SOURCE", &saved).output().unwrap();
    let report = parse(output);
    assert_eq!(report.builds, 1, "the kernel ran");
    let written: Vec<_> = std::fs::read_dir(&saved).unwrap().flatten().map(|e| e.path()).collect();
    assert!(written.is_empty(), "the setuid host wrote where its caller said: {written:?}");
    std::fs::remove_dir_all(&base).unwrap();
}

/// The same for the GPU backends' toolkit folder: CUDA_PATH (ROCM_PATH, HIP_PATH) used to be
/// read with getenv, so a setuid host dlopened its caller's libcuda.so.1: the caller's code.
#[cfg(any(feature = "cuda", feature = "rocm"))]
#[test]
fn setuid_host_loads_no_gpu_library_from_its_caller() {
    use std::os::unix::fs::PermissionsExt;
    if !is_root() {
        eprintln!("skipped: a setuid copy needs root to make");
        return;
    }
    let base = fresh_dir("setuid-gpu");
    std::fs::create_dir_all(&base).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let Some(host) = setuid_copy(&base) else {
        return std::fs::remove_dir_all(&base).unwrap();
    };
    let open = base.join("open"); // the elevated host runs as nobody: let it write the marker
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let marker = open.join("marker");
    let planted = planted_shared_object(&base, &marker);
    let mut cmd = child_command_of(&host, &base.join("cache"), "gpu");
    for (var, names) in [
        ("CUDA_PATH", &["libcuda.so.1"][..]),
        ("ROCM_PATH", &["libamdhip64.so", "libamdhip64.so.5", "libamdhip64.so.6"][..]),
        ("HIP_PATH", &["libamdhip64.so.7"][..]),
    ] {
        let lib = base.join(var).join("lib64");
        std::fs::create_dir_all(&lib).unwrap();
        for name in names {
            std::fs::write(lib.join(name), &planted).unwrap();
        }
        std::os::unix::fs::symlink(&lib, base.join(var).join("lib")).unwrap();
        cmd.env(var, base.join(var));
    }
    parse(cmd.output().unwrap());
    assert!(!marker.exists(), "the setuid host loaded its caller's library");
    std::fs::remove_dir_all(&base).unwrap();
}

/// A process that runs for months sees its folder cleaned under it (`rm -rf ~/.cache/jitbridge`,
/// a cache cleaner): its held handles then point at removed folders, and every later store used
/// to fail with one warning, the cache useless until a restart. It sets up again and stores on.
#[test]
fn a_long_running_process_stores_on_after_its_folder_is_removed() {
    for whole_folder in [false, true] {
        let dir = fresh_dir(if whole_folder { "removed-dir" } else { "removed-tmp" });
        let go =
            std::env::temp_dir().join(format!("jb-disk-go-{}-{whole_folder}", std::process::id()));
        let _ = std::fs::remove_file(&go);
        let child = child_command(&dir, "96").env(FIRST, "95").env(GO, &go).spawn().unwrap();
        wait_for(&PathBuf::from(format!("{}.ready", go.display())));
        std::fs::remove_dir_all(if whole_folder { dir.clone() } else { dir.join("tmp") }).unwrap();
        std::fs::write(&go, b"").unwrap();
        let report = parse(child.wait_with_output().unwrap());
        assert!(!report.stderr.contains("warning"), "{}", report.stderr);
        assert_eq!(entries(&dir).len(), if whole_folder { 1 } else { 2 }, "not stored");
        assert_eq!(run_child(&dir, "96").disk_hits, 1);
        std::fs::remove_dir_all(&dir).unwrap();
        let _ = std::fs::remove_file(&go);
        let _ = std::fs::remove_file(format!("{}.ready", go.display()));
    }
}

/// The same for the compiler: CC used to be read with getenv, so a setuid host ran its caller's
/// program (at `--version` and at every compile) with its own privileges.
#[test]
fn setuid_host_runs_no_compiler_of_its_caller() {
    use std::os::unix::fs::PermissionsExt;
    if !is_root() {
        eprintln!("skipped: a setuid copy needs root to make");
        return;
    }
    let base = fresh_dir("setuid-cc");
    let (open, cc) = (base.join("open"), base.join("cc"));
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let marker = open.join("marker");
    std::fs::write(&cc, format!("#!/bin/sh\necho ran > {}\nexec cc \"$@\"\n", marker.display()))
        .unwrap();
    std::fs::set_permissions(&cc, std::fs::Permissions::from_mode(0o755)).unwrap();
    let Some(host) = setuid_copy(&base) else {
        return std::fs::remove_dir_all(&base).unwrap();
    };
    let mut cmd = child_command_of(&host, &base.join("cache"), "97");
    let report = parse(cmd.env("CC", &cc).output().unwrap());
    assert_eq!(report.builds, 1, "the kernel ran");
    assert!(!marker.exists(), "the setuid host ran its caller's compiler");
    std::fs::remove_dir_all(&base).unwrap();
}
