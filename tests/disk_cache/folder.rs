//! Which folder the cache uses, and which folders it refuses (memory only, one warning): off by
//! the environment, owned by another user, writable by group or others, under a parent anyone
//! may write.

use crate::{child_command, entries, fresh_dir, is_root, parse, run_child};
use std::path::PathBuf;

/// This process (like every test process) was pointed at a temporary folder before `main`.
#[test]
fn tests_use_a_temporary_cache_folder() {
    let dir = PathBuf::from(jitbridge::disk_cache::dir());
    let own = std::env::temp_dir().join(format!("jitbridge-test-cache-{}", std::process::id()));
    assert_eq!(dir, own, "tests would write the user's cache folder");
}

#[test]
fn disk_cache_off_by_environment() {
    let dir = fresh_dir("off");
    let report = parse(child_command(&dir, "4").env("JITBRIDGE_DISK_CACHE", "0").output().unwrap());
    assert_eq!((report.builds, report.disk_misses), (1, 0));
    assert!(!dir.exists(), "the folder was created although the cache is off");
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
