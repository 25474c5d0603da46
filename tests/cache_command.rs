//! `jitbridge cache` against the built binary: it creates nothing by looking, names each bad
//! entry, fails (naming the folder and the fix) where the library would refuse the folder, and
//! writes sizes for people.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("jb-cache-cmd-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs `jitbridge cache ARGS` on the folder `dir`: (exit status, stdout, stderr).
fn cache(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_jitbridge"))
        .arg("cache")
        .args(args)
        .env("JITBRIDGE_CACHE_DIR", dir)
        .env_remove("JITBRIDGE_DISK_CACHE")
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
}

/// A genuine entry (name, bytes): compiled once by this process into its own temporary folder.
fn genuine_entry() -> &'static (String, Vec<u8>) {
    static ENTRY: OnceLock<(String, Vec<u8>)> = OnceLock::new();
    ENTRY.get_or_init(|| {
        use jitbridge::{Array, DType, Device, KernelSpec, LaunchShape};
        let kernel = common::vouched_kernel(&KernelSpec {
            name: "cache_command",
            inputs: &[("x", DType::F32)],
            outputs: &[("y", DType::F32)],
            body: "y[thread_index()] = x[thread_index()] * 5.0f;",
            ..Default::default()
        })
        .unwrap();
        let x = Array::arange(Device::cpu().unwrap(), 4, DType::F32).unwrap();
        // SAFETY: 4 threads, each its own element of two 4-element arrays.
        unsafe { kernel.launch_unchecked(&[&x], &[&[4]], LaunchShape::Threads(4)).unwrap() };
        let dir = PathBuf::from(jitbridge::disk_cache::dir());
        let entry = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|x| x == "jbc"))
            .expect("the kernel was not stored");
        let name = entry.file_name().unwrap().to_str().unwrap().to_string();
        (name, std::fs::read(entry).unwrap())
    })
}

fn folder_with_genuine_entry(name: &str) -> PathBuf {
    let dir = fresh_dir(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (entry, bytes) = genuine_entry();
    std::fs::write(dir.join(entry), bytes).unwrap();
    dir
}

#[test]
fn showing_creates_no_folder() {
    let dir = fresh_dir("show");
    let (code, stdout, stderr) = cache(&dir, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(&format!("folder   {}", dir.display())), "{stdout}");
    assert!(stdout.contains("entries  0"), "{stdout}");
    assert!(!dir.exists(), "`jitbridge cache` created the folder");
}

#[test]
fn sizes_are_readable() {
    let dir = folder_with_genuine_entry("size");
    std::fs::write(dir.join("0123456789abcdef0123456789abcdef.jbc"), vec![0u8; 3 << 20]).unwrap();
    let (code, stdout, stderr) = cache(&dir, &["show"]);
    assert_eq!(code, 0, "{stderr}");
    let total = 3 << 20 | genuine_entry().1.len();
    assert!(stdout.contains(&format!("3.0 MiB ({total} bytes)")), "{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_relative_cache_dir_is_shown_absolute() {
    let base = fresh_dir("relative");
    std::fs::create_dir_all(&base).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_jitbridge"))
        .arg("cache")
        .env("JITBRIDGE_CACHE_DIR", "relative-cache")
        .current_dir(&base)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains(&format!("folder   {}/relative-cache\n", base.display())), "{stdout}");
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn a_refused_folder_is_an_error_that_names_the_fix() {
    let dir = folder_with_genuine_entry("refused");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    for args in [&["clear"][..], &["prune", "0"], &["verify"], &["verify", "--fix"]] {
        let (code, _, stderr) = cache(&dir, args);
        assert_ne!(code, 0, "{args:?} succeeded on a refused folder");
        let fix = format!("chmod 700 {}", dir.display());
        assert!(stderr.contains(&fix), "{args:?}: {stderr} does not say {fix}");
    }
    assert!(dir.join(&genuine_entry().0).exists(), "an entry of a refused folder was removed");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn verify_names_each_bad_entry_and_fix_removes_them() {
    let dir = folder_with_genuine_entry("verify");
    let (good, _) = genuine_entry();
    let junk = "0123456789abcdef0123456789abcdef.jbc";
    std::fs::write(dir.join(junk), b"not an entry").unwrap();
    let linked = "fedcba9876543210fedcba9876543210.jbc";
    std::fs::hard_link(dir.join(good), dir.join(linked)).unwrap();
    let (code, stdout, _) = cache(&dir, &["verify"]);
    assert_eq!(code, 1, "bad entries found: exit status 1\n{stdout}");
    assert!(
        stdout.contains(&format!("bad      {}/{junk}: is malformed", dir.display())),
        "{stdout}"
    );
    for name in [good.as_str(), linked] {
        let line = format!("bad      {}/{name}: has more than one link", dir.display());
        assert!(stdout.contains(&line), "{stdout}");
    }
    // Removing the first of the two links leaves the second a single-link, valid entry.
    let (code, stdout, stderr) = cache(&dir, &["verify", "--fix"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("removed  2 bad entries"), "{stdout}");
    let (code, stdout, _) = cache(&dir, &["verify"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("valid    1\ninvalid  0"), "{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fix_belongs_to_verify() {
    let (code, _, stderr) = cache(&fresh_dir("fixflag"), &["clear", "--fix"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("--fix belongs to `cache verify`"), "{stderr}");
}

/// On a machine where nothing was compiled yet, pruning reports an empty cache (the library
/// used to sort a NULL list, which UBSan aborts on) and creates nothing.
#[test]
fn pruning_a_folder_that_does_not_exist_yet_reports_an_empty_cache() {
    let dir = fresh_dir("fresh-prune");
    for args in [&["prune", "1M"][..], &["clear"], &["verify", "--fix"]] {
        let (code, stdout, stderr) = cache(&dir, args);
        assert_eq!(code, 0, "{args:?}: {stdout}{stderr}");
        let said = if args[0] == "verify" { "invalid  0" } else { "removed  0 entries" };
        assert!(stdout.contains(said), "{args:?}: {stdout}");
    }
    assert!(!dir.exists(), "pruning created the folder");
}

/// A folder that is not the cache's own (no CACHEDIR.TAG, and files of the user's in it) is
/// never cleared, pruned or fixed: an error that says why, and every file stays.
#[test]
fn a_shared_folder_is_never_cleared() {
    let dir = folder_with_genuine_entry("shared");
    std::fs::write(dir.join("notes.txt"), b"the user's").unwrap();
    for args in [&["clear"][..], &["prune", "0"], &["verify", "--fix"]] {
        let (code, stdout, stderr) = cache(&dir, args);
        assert_ne!(code, 0, "{args:?} succeeded on a shared folder: {stdout}");
        assert!(stderr.contains("CACHEDIR.TAG"), "{args:?}: {stderr}");
    }
    let (code, stdout, stderr) = cache(&dir, &["show"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("state    on, shared"), "{stdout}");
    assert!(stdout.contains("entries  1"), "{stdout}");
    assert!(dir.join(&genuine_entry().0).exists(), "an entry of a shared folder was removed");
    assert_eq!(std::fs::read(dir.join("notes.txt")).unwrap(), b"the user's");
    std::fs::remove_dir_all(&dir).unwrap();
}
