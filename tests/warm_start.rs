//! A new process starting warm: bundles exported from one cache, used in place or imported by
//! another process in another folder, and prewarm from a manifest or a bundle. Each test re-runs
//! this test binary as a child (the `child_entry` test, inert unless JB_BUNDLE_TEST_CHILD is
//! set).

mod common;

use jitbridge::{Array, Counters, CustomKernel, DType, Device, LaunchShape, disk_cache};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD: &str = "JB_BUNDLE_TEST_CHILD";

fn salted_kernel(salt: u32) -> CustomKernel {
    common::salted_kernel("bundled", 7, salt)
}

/// In the child: "launch:<salts>", "gpu-first:<salts>" (a GPU asked for, then the launches),
/// "export:<path>[:<manifest>]", "import:<path>",
/// "add:<bundle>:<salts>" (jb_disk_cache_add_bundle, then the launches) or
/// "prewarm:<path>:<salts>" (jitbridge::disk_cache::prewarm twice, then the launches from 8
/// threads); prints what it did.
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
        "gpu-first" => {
            // Sets every GPU backend up first (failing where there is none): the cpu's index
            // and the backends set up then differ from a process that never asked for a GPU.
            let _ = Device::gpu(0);
            Ok(launch(arg))
        }
        "prewarm" => {
            let (path, salts) = arg.split_once(':').unwrap();
            prewarm_then_launch(Path::new(path), salts)
        }
        _ => panic!("unknown job {job}"),
    };
    match outcome {
        Ok(text) => println!("DONE ok {text}"),
        Err(e) => println!("DONE err {e}"),
    }
}

/// Launches each salt; "builds=.. disk_hits=.. bundle_hits=.. bundle_rejected=.. exact=..".
fn launch(salts: &str) -> String {
    let exact = launch_exact(salts);
    let c = Counters::read();
    format!(
        "builds={} disk_hits={} bundle_hits={} bundle_rejected={} exact={exact}",
        c.builds, c.disk_hits, c.bundle_hits, c.bundle_rejected
    )
}

/// Prewarms twice (the second finds everything present), then 8 threads launch every salt.
fn prewarm_then_launch(path: &Path, salts: &str) -> Result<String, jitbridge::Error> {
    let device = Device::cpu()?;
    let first = disk_cache::prewarm(device, path)?;
    let again = disk_cache::prewarm(device, path)?;
    let before = Counters::read();
    let exact = std::thread::scope(|s| {
        let threads: Vec<_> = (0..8).map(|_| s.spawn(|| launch_exact(salts))).collect();
        threads.into_iter().all(|t| t.join().unwrap())
    });
    let c = Counters::read().since(&before);
    Ok(format!(
        "loaded={} present={} missing={} other={} failed={} again_present={} \
         launch_builds={} launch_misses={} launch_disk_hits={} exact={exact}",
        first.loaded,
        first.present,
        first.missing,
        first.other,
        first.failed,
        again.present,
        c.builds,
        c.misses,
        c.disk_hits + c.bundle_hits
    ))
}

/// Launches each salt once; whether every output was right.
fn launch_exact(salts: &str) -> bool {
    let input = Array::arange(Device::cpu().unwrap(), 32, DType::F32).unwrap();
    let mut exact = true;
    for salt in salts.split(',').filter(|s| !s.is_empty()).map(|s| s.parse::<u32>().unwrap()) {
        // SAFETY: 32 threads, each its own element of two 32-element arrays.
        let out = unsafe {
            salted_kernel(salt).launch_unchecked(&[&input], &[&[32]], LaunchShape::Threads(32))
        };
        let values = out.unwrap()[0].to_vec::<f32>().unwrap();
        exact &= values.iter().enumerate().all(|(i, &v)| v == i as f32 * 7.0 + salt as f32);
    }
    exact
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
    let copied = std::fs::read_dir(&second).map_or(0, |d| {
        d.filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "jbc")).count()
    });
    assert_eq!(copied, 0, "entries were written to the second cache");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A cpu kernel's key is its content's alone: a process that set a GPU backend up before its
/// first cpu launch (the cpu then comes after the GPUs in the device table) makes the key of a
/// process that never asked for a GPU, and each finds the other's entries in the cache folder.
#[test]
fn a_cpu_kernels_key_does_not_depend_on_the_gpu_backends_set_up() {
    let dir = fresh("gpu-first");
    let keys = |manifest: &Path| -> Vec<String> {
        let text = std::fs::read_to_string(manifest).unwrap();
        let mut keys: Vec<String> =
            text.lines().map(|l| l.split('\t').nth(1).unwrap().to_string()).collect();
        keys.sort();
        keys
    };
    let (with_gpu, without) = (dir.join("with-gpu"), dir.join("without"));
    let (m_with, m_without) = (dir.join("with.manifest"), dir.join("without.manifest"));
    let (report, _) =
        Child::new(&with_gpu, "gpu-first:20,21").env("JITBRIDGE_MANIFEST", &m_with).ok();
    assert_eq!(count(&report, "builds"), 2, "{report}");
    let (report, _) =
        Child::new(&without, "launch:20,21").env("JITBRIDGE_MANIFEST", &m_without).ok();
    assert_eq!(count(&report, "builds"), 2, "{report}");
    assert_eq!(keys(&m_with).len(), 2);
    assert_eq!(keys(&m_with), keys(&m_without), "the keys differ");
    // Each process finds the other's entries.
    let (report, _) = Child::new(&with_gpu, "launch:20,21").ok();
    assert_eq!((count(&report, "disk_hits"), count(&report, "builds")), (2, 0), "{report}");
    let (report, _) = Child::new(&without, "gpu-first:20,21").ok();
    assert_eq!((count(&report, "disk_hits"), count(&report, "builds")), (2, 0), "{report}");
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

/// Prewarm from a manifest: every kernel it names that the cache holds is in memory before its
/// first launch, and 8 threads then first-launch them all without a build or a disk read.
/// Kernels of another compiler (their entries' keys name clang) and kernels the cache lacks
/// are counted, not loaded. The kernels to load are built with the compiler the prewarm names
/// (gcc), never with whatever CC the test's environment holds: a key holds the compiler.
#[test]
fn prewarm_puts_a_manifests_kernels_in_memory_before_their_first_launch() {
    let dir = fresh("prewarm");
    let cache = dir.join("cache");
    let manifest = dir.join("m.manifest");
    let first = Child::new(&cache, "launch:80,81,82,83").env("CC", "gcc");
    first.env("JITBRIDGE_MANIFEST", &manifest).ok();
    let clang_found = Command::new("clang").arg("--version").output().is_ok();
    if clang_found {
        let by_clang = Child::new(&cache, "launch:84").env("CC", "clang");
        by_clang.env("JITBRIDGE_MANIFEST", &manifest).ok();
    }
    let gone = Child::new(&dir.join("elsewhere"), "launch:85");
    gone.env("JITBRIDGE_MANIFEST", &manifest).ok(); // named, but in another cache folder
    let job = format!("prewarm:{}:80,81,82,83", manifest.display());
    let (report, stderr) = Child::new(&cache, &job).env("CC", "gcc").ok();
    assert_exact(&report);
    assert_eq!(
        (count(&report, "loaded"), count(&report, "missing"), count(&report, "failed")),
        (4, 1, 0),
        "{report}\n{stderr}"
    );
    assert_eq!(count(&report, "other"), u64::from(clang_found), "{report}");
    assert_eq!(count(&report, "again_present"), 4, "{report}");
    assert_eq!(
        (
            count(&report, "launch_builds"),
            count(&report, "launch_misses"),
            count(&report, "launch_disk_hits")
        ),
        (0, 0, 0),
        "the first launches did not all find their module in memory: {report}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Prewarm from a bundle, in a process whose own cache folder is empty.
#[test]
fn prewarm_from_a_bundle_loads_every_kernel_for_this_device() {
    let dir = fresh("prewarm-bundle");
    Child::new(&dir.join("first"), "launch:90,91,92").ok();
    let bundle = dir.join("b.jbb");
    Child::new(&dir.join("first"), &format!("export:{}", bundle.display())).ok();
    let job = format!("prewarm:{}:90,91,92", bundle.display());
    let (report, _) = Child::new(&dir.join("second"), &job).ok();
    assert_exact(&report);
    assert_eq!((count(&report, "loaded"), count(&report, "other")), (3, 0), "{report}");
    assert_eq!((count(&report, "launch_builds"), count(&report, "launch_misses")), (0, 0));
    // A bundle others may write is refused, as it would be as a tier.
    std::fs::set_permissions(&bundle, std::os::unix::fs::PermissionsExt::from_mode(0o646)).unwrap();
    let (outcome, _) = Child::new(&dir.join("third"), &job).run();
    let err = outcome.unwrap_err();
    assert!(err.contains("writable by group or others"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
