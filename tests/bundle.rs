//! Bundles between processes: exported from one cache, used in place or imported by another
//! process in another folder. Each test re-runs this test binary as a child (the `child_entry`
//! test, inert unless JB_BUNDLE_TEST_CHILD is set).

mod common;

use jitbridge::{
    Array, Counters, CustomKernel, DType, Device, KernelSpec, LaunchShape, disk_cache,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD: &str = "JB_BUNDLE_TEST_CHILD";

fn salted_kernel(salt: u32) -> CustomKernel {
    let body = format!("out[thread_index()] = inp[thread_index()] * 7.0f + {salt}.0f;");
    CustomKernel::new(&KernelSpec {
        name: "bundled",
        inputs: &[("inp", DType::F32)],
        outputs: &[("out", DType::F32)],
        body: &body,
        ..Default::default()
    })
    .unwrap()
}

/// In the child: "launch:<salts>", "export:<path>[:<manifest>]", "import:<path>" or
/// "add:<bundle>:<salts>" (jb_disk_cache_add_bundle, then the launches); prints what it did.
#[test]
fn child_entry() {
    let Ok(job) = std::env::var(CHILD) else { return };
    let (op, arg) = job.split_once(':').unwrap();
    let outcome = match op {
        "export" => {
            let (path, manifest) = match arg.split_once(':') {
                Some((p, m)) => (p, Some(Path::new(m))),
                None => (arg, None),
            };
            disk_cache::export(Path::new(path), manifest).map(|(n, s)| format!("{n} {s}"))
        }
        "import" => disk_cache::import(Path::new(arg)).map(|(n, s)| format!("{n} {s}")),
        "add" => {
            let (bundle, salts) = arg.split_once(':').unwrap();
            disk_cache::add_bundle(Path::new(bundle)).map(|()| launch(salts))
        }
        "launch" => Ok(launch(arg)),
        _ => panic!("unknown job {job}"),
    };
    match outcome {
        Ok(text) => println!("DONE ok {text}"),
        Err(e) => println!("DONE err {e}"),
    }
}

/// Launches each salt; "builds=.. disk_hits=.. bundle_hits=.. bundle_rejected=.. exact=..".
fn launch(salts: &str) -> String {
    let input = Array::arange(Device::cpu().unwrap(), 32, DType::F32).unwrap();
    let mut exact = true;
    for salt in salts.split(',').filter(|s| !s.is_empty()).map(|s| s.parse::<u32>().unwrap()) {
        let out = salted_kernel(salt).launch(&[&input], &[&[32]], LaunchShape::Threads(32));
        let values = out.unwrap()[0].to_vec::<f32>().unwrap();
        exact &= values.iter().enumerate().all(|(i, &v)| v == i as f32 * 7.0 + salt as f32);
    }
    let c = Counters::read();
    format!(
        "builds={} disk_hits={} bundle_hits={} bundle_rejected={} exact={exact}",
        c.builds, c.disk_hits, c.bundle_hits, c.bundle_rejected
    )
}

struct Child {
    cmd: Command,
}

impl Child {
    fn new(cache: &Path, job: &str) -> Child {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env(CHILD, job)
            .env("JITBRIDGE_CACHE_DIR", cache)
            .env_remove("JITBRIDGE_DISK_CACHE")
            .env_remove("JITBRIDGE_CACHE_BUNDLE")
            .env_remove("JITBRIDGE_MANIFEST")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Child { cmd }
    }

    fn env(mut self, name: &str, value: impl AsRef<std::ffi::OsStr>) -> Child {
        self.cmd.env(name, value);
        self
    }

    /// Runs it: Ok(what it printed after "DONE ok ") or Err(the error), and its stderr.
    fn run(self) -> (Result<String, String>, String) {
        let output = common::finish(self.cmd, Duration::from_secs(120));
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "child failed: {stdout}\n{stderr}");
        let line = stdout.lines().find_map(|l| l.find("DONE ").map(|at| &l[at + 5..])).unwrap();
        let outcome = match line.strip_prefix("ok ") {
            Some(text) => Ok(text.to_string()),
            None => Err(line.strip_prefix("err ").unwrap_or(line).to_string()),
        };
        (outcome, stderr)
    }

    fn ok(self) -> (String, String) {
        let (outcome, stderr) = self.run();
        (outcome.unwrap_or_else(|e| panic!("{e}\n{stderr}")), stderr)
    }
}

/// The number after "name=" in a child's report.
fn count(report: &str, name: &str) -> u64 {
    let prefix = format!("{name}=");
    let field = report.split_whitespace().find_map(|kv| kv.strip_prefix(prefix.as_str()));
    field.unwrap_or_else(|| panic!("no {name} in {report}")).parse().unwrap()
}

fn assert_exact(report: &str) {
    assert!(report.ends_with("exact=true"), "a wrong output: {report}");
}

fn fresh(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("jb-bundle-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn salts(range: std::ops::Range<u32>) -> String {
    range.map(|s| s.to_string()).collect::<Vec<_>>().join(",")
}

/// The cache of one checkout (its own folder, CC=gcc) exported; the bundle moved to another
/// path and used in place by a process in another folder, working directory and CC spelling:
/// every kernel a bundle hit, none compiled.
#[test]
fn a_bundle_moved_to_another_path_serves_every_kernel_in_place() {
    let dir = fresh("moved");
    let (first, second) = (dir.join("checkout-a/cache"), dir.join("checkout-b/cache"));
    let all = salts(0..12);
    let (report, _) = Child::new(&first, &format!("launch:{all}")).env("CC", "gcc").ok();
    assert_eq!(count(&report, "builds"), 12);
    let made = dir.join("checkout-a/kernels.jbb");
    let (exported, _) = Child::new(&first, &format!("export:{}", made.display())).ok();
    assert_eq!(exported, "12 0");
    std::fs::create_dir_all(dir.join("image/opt")).unwrap();
    let moved = dir.join("image/opt/fleet.jbb");
    std::fs::rename(&made, &moved).unwrap();
    std::fs::create_dir_all(dir.join("checkout-b/work")).unwrap();
    let mut child = Child::new(&second, &format!("launch:{all}"))
        .env("JITBRIDGE_CACHE_BUNDLE", &moved)
        .env("CC", "/usr/bin/gcc");
    child.cmd.current_dir(dir.join("checkout-b/work"));
    let (report, stderr) = child.ok();
    assert_exact(&report);
    assert_eq!(
        (count(&report, "builds"), count(&report, "bundle_hits"), count(&report, "disk_hits")),
        (0, 12, 0),
        "{report}\n{stderr}"
    );
    assert!(!stderr.contains("warning"), "{stderr}");
    // Used in place: nothing was copied into the second cache folder.
    let copied = std::fs::read_dir(&second).map(|d| d.count()).unwrap_or(0);
    assert!(copied <= 1, "entries were written to the second cache ({copied} names)");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Exported with a manifest: only its kernels. Imported: the cache folder then hits.
#[test]
fn a_manifest_chooses_what_is_exported_and_import_fills_another_cache() {
    let dir = fresh("manifest");
    let (first, second) = (dir.join("first"), dir.join("second"));
    let manifest = dir.join("serve.manifest");
    Child::new(&first, "launch:1,2").env("JITBRIDGE_MANIFEST", &manifest).ok();
    Child::new(&first, "launch:3").ok(); // compiled, but not in the manifest
    let bundle = dir.join("serve.jbb");
    let job = format!("export:{}:{}", bundle.display(), manifest.display());
    assert_eq!(Child::new(&first, &job).ok().0, "2 0");
    let (report, _) =
        Child::new(&second, "launch:1,2,3").env("JITBRIDGE_CACHE_BUNDLE", &bundle).ok();
    assert_eq!((count(&report, "bundle_hits"), count(&report, "builds")), (2, 1), "{report}");

    let third = dir.join("third");
    let (imported, _) = Child::new(&third, &format!("import:{}", bundle.display())).ok();
    assert_eq!(imported, "2 0");
    let (report, _) = Child::new(&third, "launch:1,2").ok();
    assert_eq!((count(&report, "disk_hits"), count(&report, "builds")), (2, 0), "{report}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The API adds a bundle; a refused one is an error that names it, and kernels still run.
#[test]
fn add_bundle_serves_or_says_why_not() {
    use std::os::unix::fs::PermissionsExt;
    let dir = fresh("add");
    let (first, second) = (dir.join("first"), dir.join("second"));
    Child::new(&first, "launch:40,41").ok();
    let bundle = dir.join("b.jbb");
    Child::new(&first, &format!("export:{}", bundle.display())).ok();
    let (report, _) = Child::new(&second, &format!("add:{}:40,41", bundle.display())).ok();
    assert_eq!((count(&report, "bundle_hits"), count(&report, "builds")), (2, 0), "{report}");

    std::fs::set_permissions(&bundle, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (outcome, _) = Child::new(&second, &format!("add:{}:40", bundle.display())).run();
    let err = outcome.unwrap_err();
    assert!(err.contains("writable by group or others") && err.contains("b.jbb"), "{err}");
    // The same through the environment: a warning, and the kernel is compiled.
    let (report, stderr) =
        Child::new(&second, "launch:40").env("JITBRIDGE_CACHE_BUNDLE", &bundle).ok();
    assert_exact(&report);
    assert_eq!((count(&report, "bundle_hits"), count(&report, "builds")), (0, 1), "{report}");
    assert!(stderr.contains("JITBRIDGE_CACHE_BUNDLE") && stderr.contains("writable"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A bundle of root's in a folder of root's, read-only, used by an unprivileged user without a
/// cache folder of its own (a read-only image layer): every kernel from the bundle.
#[test]
fn a_read_only_bundle_of_roots_serves_an_unprivileged_user() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { geteuid() } != 0 {
        return eprintln!("not tried: making a file of root's and another user needs root");
    }
    let dir = fresh("readonly");
    let first = dir.join("first");
    Child::new(&first, "launch:60,61,62").ok();
    let image = dir.join("image");
    std::fs::create_dir_all(&image).unwrap();
    let bundle = image.join("fleet.jbb");
    Child::new(&first, &format!("export:{}", bundle.display())).ok();
    std::fs::set_permissions(&bundle, std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(&image, std::fs::Permissions::from_mode(0o555)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut child = Child::new(Path::new("/nonexistent/cache"), "launch:60,61,62")
        .env("JITBRIDGE_CACHE_BUNDLE", &bundle)
        .env("JITBRIDGE_DISK_CACHE", "0")
        .env("HOME", "/nonexistent");
    child.cmd.uid(65534).gid(65534);
    let (report, stderr) = child.ok();
    assert_exact(&report);
    assert_eq!((count(&report, "bundle_hits"), count(&report, "builds")), (3, 0), "{stderr}");
    std::fs::set_permissions(&image, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

unsafe extern "C" {
    fn geteuid() -> u32;
}
