//! A cache folder that is not the cache's own (`JITBRIDGE_CACHE_DIR=.`, `$HOME`) loses nothing:
//! the cache stores and loads there, but sweeps, replaces and removes nothing of the user's.

use super::*;

/// The first compile in such a folder used to delete every file older than an hour in its
/// tmp/ and replace a file named tmp with a folder.
#[test]
fn a_shared_folder_loses_nothing() {
    let dir = fresh_dir("shared");
    std::fs::create_dir_all(dir.join("old")).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(7200);
    let files = [("tmp", "a file named tmp"), ("old/draft.txt", "kept"), ("notes.tmp", "mine")];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
        let file = std::fs::File::options().write(true).open(dir.join(name)).unwrap();
        file.set_modified(two_hours_ago).unwrap();
    }
    let run = || {
        let mut cmd = child_command(&dir, "70");
        parse(cmd.env("JITBRIDGE_CACHE_DIR", ".").current_dir(&dir).output().unwrap())
    };
    assert_eq!(run().builds, 1);
    let second = run();
    assert_eq!(
        (second.builds, second.disk_hits),
        (0, 1),
        "no entry was served from a shared folder"
    );
    for (name, text) in files {
        let kind = std::fs::symlink_metadata(dir.join(name)).unwrap().file_type();
        assert!(kind.is_file(), "{name} is no longer a file");
        assert_eq!(std::fs::read_to_string(dir.join(name)).unwrap(), text, "{name} changed");
    }
    assert!(!dir.join("CACHEDIR.TAG").exists(), "the user's folder was marked as the cache's");
    let (outcome, _) = run_admin(&mut child_command(&dir, "admin:clear"));
    let message = outcome.unwrap_err();
    assert!(message.contains("CACHEDIR.TAG"), "{message}");
    assert_eq!(entries(&dir).len(), 1, "clear removed an entry from a shared folder");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An older version's folder (entries and a tmp/ of its temporaries, no tag) is the cache's
/// own by its contents: it is marked, and its entries are served.
#[test]
fn an_older_versions_folder_is_adopted() {
    let dir = fresh_dir("older");
    run_child(&dir, "71");
    std::fs::remove_file(dir.join("CACHEDIR.TAG")).unwrap();
    let report = run_child(&dir, "71");
    assert_eq!((report.builds, report.disk_hits), (0, 1));
    let tag = std::fs::read_to_string(dir.join("CACHEDIR.TAG")).unwrap();
    assert!(tag.starts_with("Signature: 8a477f597d28d172789f06886806bc55\n"), "{tag}");
    std::fs::remove_dir_all(&dir).unwrap();
}
