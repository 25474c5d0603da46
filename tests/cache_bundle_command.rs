//! `jitbridge cache export`, `import` and `prewarm` against the built binary, on entries this
//! test process compiles into its own temporary cache folder.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `jitbridge cache ARGS` on the folder `dir`: (exit status, stdout, stderr).
fn cache(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_jitbridge"))
        .arg("cache")
        .args(args)
        .env("JITBRIDGE_CACHE_DIR", dir)
        .env_remove("JITBRIDGE_DISK_CACHE")
        .env_remove("JITBRIDGE_CACHE_BUNDLE")
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
}

/// Three kernels compiled by this process into its own cache folder; that folder.
fn compiled_folder() -> PathBuf {
    use jitbridge::{Array, DType, Device, KernelSpec, LaunchShape};
    let x = Array::arange(Device::cpu().unwrap(), 4, DType::F32).unwrap();
    for salt in 0..3 {
        let body = format!("y[thread_index()] = x[thread_index()] * 3.0f + {salt}.0f;");
        let kernel = common::vouched_kernel(&KernelSpec {
            name: "bundle_command",
            inputs: &[("x", DType::F32)],
            outputs: &[("y", DType::F32)],
            body: &body,
            ..Default::default()
        })
        .unwrap();
        // SAFETY: 4 threads, each its own element of two 4-element arrays.
        unsafe { kernel.launch_unchecked(&[&x], &[&[4]], LaunchShape::Threads(4)).unwrap() };
    }
    PathBuf::from(jitbridge::disk_cache::dir())
}

fn fresh(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("jb-bundle-cmd-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn export_import_and_prewarm_move_a_cache_to_another_folder() {
    let made = compiled_folder();
    let dir = fresh("move");
    let bundle = dir.join("fleet.jbb");
    let (status, out, err) = cache(&made, &["export", bundle.to_str().unwrap()]);
    assert_eq!(status, 0, "{out}{err}");
    assert!(out.contains("exported 3 entries"), "{out}");

    let other = dir.join("other");
    let (status, out, err) = cache(&other, &["import", bundle.to_str().unwrap()]);
    assert_eq!(status, 0, "{out}{err}");
    assert!(out.contains("imported 3 entries"), "{out}");
    let (_, shown, _) = cache(&other, &["show"]);
    assert!(shown.contains("entries  3"), "{shown}");

    let third = dir.join("third");
    let (status, out, err) =
        cache(&third, &["prewarm", bundle.to_str().unwrap(), "--device", "cpu"]);
    assert_eq!(status, 0, "{out}{err}");
    assert!(out.contains("loaded   3 kernels for cpu") && out.contains("(0 compiles)"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A manifest that names a kernel the cache lacks: the others are exported, the status says
/// some were left out.
#[test]
fn an_export_that_leaves_kernels_out_says_so() {
    let made = compiled_folder();
    let dir = fresh("manifest");
    let manifest = dir.join("m.manifest");
    let absent = "f".repeat(64);
    std::fs::write(&manifest, format!("jbm1\t{absent}\tcpu\tx\tm\tm\tcompiled\n")).unwrap();
    let bundle = dir.join("some.jbb");
    let args = ["export", bundle.to_str().unwrap(), "--manifest", manifest.to_str().unwrap()];
    let (status, out, _) = cache(&made, &args);
    assert_eq!(status, 1, "{out}");
    assert!(out.contains("exported 0 entries") && out.contains("skipped  1"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn each_action_takes_its_own_file_and_options() {
    let dir = fresh("usage");
    for (args, says) in [
        (&["export"][..], "cache export needs a FILE"),
        (&["import"][..], "cache import needs a FILE"),
        (&["prewarm", "a", "b"][..], "unexpected argument 'b'"),
        (&["import", "a", "--manifest", "m"][..], "--manifest belongs to `cache export`"),
        (&["export", "a", "--device", "cpu"][..], "--device belongs to `cache prewarm`"),
    ] {
        let (status, _, err) = cache(&dir, args);
        assert_eq!(status, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let (status, _, err) = cache(&dir, &["import", dir.join("none.jbb").to_str().unwrap()]);
    assert_eq!(status, 2, "{err}");
    assert!(err.contains("none.jbb") && err.contains("No such file"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

const SOURCES_CHILD: &str = "JB_BUNDLE_SOURCES_CHILD";

/// In a child (JITBRIDGE_MANIFEST set): with JB_BUNDLE_SOURCES_CHILD empty, compiles the three
/// kernels, so that its cache folder keeps their source records; else checks the records the
/// manifest it names names, in this folder, compiling nothing.
#[test]
fn sources_child_entry() {
    let Ok(manifest) = std::env::var(SOURCES_CHILD) else { return };
    if manifest.is_empty() {
        compiled_folder();
    } else {
        let (checked, keyed) = jitbridge::disk_cache::check_sources(Path::new(&manifest)).unwrap();
        println!("SOURCES checked={checked} keyed={keyed}");
    }
}

fn sources_child(cache: &Path, manifest: &Path, check: &str) -> String {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "sources_child_entry", "--nocapture", "--test-threads=1"])
        .env(SOURCES_CHILD, check)
        .env("JITBRIDGE_CACHE_DIR", cache)
        .env("JITBRIDGE_MANIFEST", manifest)
        .env_remove("JITBRIDGE_DISK_CACHE")
        .env_remove("JITBRIDGE_CACHE_BUNDLE")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "child failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn records_in(folder: &Path) -> usize {
    std::fs::read_dir(folder.join("sources")).map_or(0, |d| {
        d.filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".jbs")).count()
    })
}

/// `export --with-sources` carries each entry's source record; `import` into an empty folder
/// puts them into its sources/, where they pass the check of the exporter's manifest.
#[test]
fn export_with_sources_carries_the_records_to_another_folder() {
    let dir = fresh("sources");
    let (made, manifest) = (dir.join("made"), dir.join("made.manifest"));
    sources_child(&made, &manifest, "");
    assert_eq!(records_in(&made), 3);
    let bundle = dir.join("with.jbb");
    let (status, out, err) = cache(&made, &["export", bundle.to_str().unwrap(), "--with-sources"]);
    assert_eq!(status, 0, "{out}{err}");
    assert!(
        out.contains("records  3 source records carried") && out.contains("exported 3"),
        "{out}"
    );

    let other = dir.join("other");
    let (status, out, err) = cache(&other, &["import", bundle.to_str().unwrap()]);
    assert_eq!(status, 0, "{out}{err}");
    assert!(
        out.contains("imported 3 entries") && out.contains("records  3 source records"),
        "{out}"
    );
    assert_eq!(records_in(&other), 3);
    let checked = sources_child(&other, &dir.join("other.manifest"), manifest.to_str().unwrap());
    assert!(checked.contains("SOURCES checked=3 keyed=3"), "{checked}");

    // Without --with-sources: the bundle as before, no records imported.
    let plain = dir.join("plain.jbb");
    let (status, out, err) = cache(&made, &["export", plain.to_str().unwrap()]);
    assert_eq!(status, 0, "{out}{err}");
    assert!(!out.contains("records"), "{out}");
    let third = dir.join("third");
    let (status, out, err) = cache(&third, &["import", plain.to_str().unwrap()]);
    assert_eq!(status, 0, "{out}{err}");
    assert!(out.contains("imported 3 entries") && !out.contains("records"), "{out}");
    assert_eq!(records_in(&third), 0);
    let (status, _, err) = cache(&third, &["import", "x", "--with-sources"]);
    assert_eq!(status, 2, "{err}");
    assert!(err.contains("--with-sources belongs to `cache export`"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
