//! Maintenance (`jitbridge cache`'s calls): show creates nothing, clear and check/fix apply the
//! library's own trust rules and say what they could not do.

use crate::{child_command, entries, fresh_dir, is_root, make_fifo, run_admin, run_child};
use std::path::Path;
use std::path::PathBuf;

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
    let tag = dir.join("CACHEDIR.TAG");
    for path in [entries(&dir).pop().unwrap(), dir.join("tmp"), tag, dir.clone()] {
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
