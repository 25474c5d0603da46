//! The disk cache, seen from new processes: each test re-runs this test binary as a child (the
//! `child_entry` test, inert unless JB_DISK_TEST_CHILD is set) with its own cache folder.

use jitbridge::{Array, Counters, CustomKernel, DType, Device, KernelSpec, LaunchShape};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const CHILD: &str = "JB_DISK_TEST_CHILD";

/// A kernel whose source depends on `salt`, so that salts are distinct cache entries.
fn salted_kernel(salt: u32) -> CustomKernel {
    let body = format!("out[thread_index()] = inp[thread_index()] * 3.0f + {salt}.0f;");
    CustomKernel::new(&KernelSpec {
        name: "disk_cached",
        inputs: &[("inp", DType::F32)],
        outputs: &[("out", DType::F32)],
        body: &body,
        header: None,
        configure: None,
    })
    .unwrap()
}

/// In the child: launch the kernels the parent asked for and report the counters.
#[test]
fn child_entry() {
    let Ok(job) = std::env::var(CHILD) else { return };
    let device = Device::cpu().unwrap();
    let input = Array::arange(device, 64, DType::F32).unwrap();
    let mut exact = true;
    if job == "probe" {
        let out = jitbridge::jit_race_probe_array(&input, 7).unwrap();
        exact &= jitbridge::race::probe_output_exact(&out.to_vec::<f32>().unwrap());
    } else {
        for salt in job.split(',').map(|s| s.parse::<u32>().unwrap()) {
            let out = salted_kernel(salt).launch(&[&input], &[&[64]], LaunchShape::Threads(64));
            let values = out.unwrap()[0].to_vec::<f32>().unwrap();
            exact &= values.iter().enumerate().all(|(i, &v)| v == i as f32 * 3.0 + salt as f32);
        }
    }
    let c = Counters::read();
    println!(
        "RESULT builds={} disk_hits={} disk_misses={} disk_rejected={} exact={exact}",
        c.builds, c.disk_hits, c.disk_misses, c.disk_rejected
    );
}

struct Report {
    builds: u64,
    disk_hits: u64,
    disk_misses: u64,
    disk_rejected: u64,
    stderr: String,
}

fn child_command(dir: &Path, job: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
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
