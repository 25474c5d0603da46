//! What one process stores and the next loads, and what a process does with an entry that is
//! damaged, not a file, or not trustworthy: it rebuilds and replaces it, never blocks, and keeps
//! the cache on.

use crate::{
    GO, child_command, entries, entry_name, fresh_dir, is_root, make_fifo, parse, run_child,
    wait_for,
};
use std::path::Path;
use std::time::Duration;
use std::time::Instant;

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

/// In the cache's own folder, temporaries (by their name) left by killed writers are swept and
/// fresh ones kept; nothing else in tmp/ is touched, however old.
#[test]
fn stale_temporaries_are_swept_and_fresh_ones_kept() {
    let dir = fresh_dir("sweep");
    run_child(&dir, "12"); // the folder is made, and marked as the cache's own
    assert!(dir.join("CACHEDIR.TAG").is_file());
    let stale = dir.join("tmp/0123456789abcdef0123456789abcdef.tmp");
    let fresh = dir.join("tmp/fedcba9876543210fedcba9876543210.tmp");
    let not_ours = dir.join("tmp/killed-writer.tmp");
    for path in [&stale, &fresh, &not_ours] {
        std::fs::write(path, b"half an entry").unwrap();
    }
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    for path in [&stale, &not_ours] {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(two_hours_ago).unwrap();
    }
    run_child(&dir, "13");
    assert!(!stale.exists(), "a temporary left by a killed writer was not swept");
    assert!(fresh.exists(), "a temporary a live writer may own was removed");
    assert!(not_ours.exists(), "a file not named like a temporary was swept");
    std::fs::remove_dir_all(&dir).unwrap();
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
    // Blocking is caught by the 10 s bound above; the launch's time (a compile) is only shown,
    // as a loaded machine can take seconds to compile.
    eprintln!("a process meeting a FIFO entry: {elapsed:?}, its launch {} ms", report.launch_ms);
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
