//! A disk that fails under the cache: unwritable, full, read-only, or cleaned while a process
//! runs. The kernels still run; the cache warns once and serves or stores what it still can.

use crate::{FIRST, GO, child_command, entries, fresh_dir, is_root, parse, run_child, wait_for};
use std::path::PathBuf;

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
