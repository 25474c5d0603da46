//! The coverage check from Rust and from the command: which kernels of a manifest a launch would
//! find in memory, the cache folder or a bundle, and which would compile; `jitbridge cache
//! coverage MANIFEST` exits 1 when one would. One test in this binary: the cache folder and the
//! manifest are read once per process, from the environment.

mod common;

use jitbridge::disk_cache::{self, CoverageSource};
use jitbridge::{Array, Counters, CustomKernel, DType, Device, LaunchShape};
use std::io::Write;
use std::process::Command;
use std::time::Duration;

fn salted_kernel(name: &str, salt: u32) -> CustomKernel {
    common::salted_kernel(name, 3, salt)
}

/// `jitbridge cache coverage MANIFEST` and `extra` (`--device D`): without `--device`, each
/// kernel is checked on this host's device that its line names, the cpu's on the cpu even where
/// a GPU is the default device.
fn coverage_command(
    cache: &std::path::Path,
    manifest: &std::path::Path,
    extra: &[&str],
) -> (Option<i32>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_jitbridge"));
    command
        .args(["cache", "coverage"])
        .arg(manifest)
        .args(extra)
        .env("JITBRIDGE_CACHE_DIR", cache)
        .env_remove("JITBRIDGE_MANIFEST")
        .env_remove("JITBRIDGE_CACHE_BUNDLE")
        .env_remove("JITBRIDGE_DISK_CACHE");
    let output = common::finish(command, Duration::from_secs(120));
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.code(), text)
}

#[test]
fn coverage_says_where_each_kernel_would_come_from() {
    let dir = std::env::temp_dir().join(format!("jb-coverage-rs-{}", std::process::id()));
    let (cache, manifest) = (dir.join("cache"), dir.join("kernels.manifest"));
    std::fs::create_dir_all(&dir).unwrap();
    {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&manifest)
            .unwrap();
    }
    // SAFETY: the only test of this binary, before the library reads them.
    unsafe {
        std::env::set_var("JITBRIDGE_CACHE_DIR", &cache);
        std::env::set_var("JITBRIDGE_MANIFEST", &manifest);
        std::env::remove_var("JITBRIDGE_CACHE_BUNDLE");
        std::env::remove_var("JITBRIDGE_DISK_CACHE");
    }
    let cpu = Device::cpu().unwrap();
    let salt = std::process::id();
    let kernels = [salted_kernel("covered_one", salt), salted_kernel("covered_two", salt)];
    let input = Array::arange(cpu, 8, DType::F32).unwrap();
    for k in &kernels {
        // SAFETY: 8 threads, each its own element of two 8-element arrays.
        let out = unsafe { k.launch_unchecked(&[&input], &[&[8]], LaunchShape::Threads(8)) };
        out.unwrap()[0].eval().unwrap();
    }

    let before = Counters::read();
    for device in [Some(cpu), None] {
        let coverage = disk_cache::coverage(device, &manifest).unwrap();
        let sources: Vec<CoverageSource> = coverage.kernels.iter().map(|k| k.source).collect();
        assert_eq!(sources, [CoverageSource::Memory, CoverageSource::Memory]);
        for (k, kernel) in coverage.kernels.iter().zip(&kernels) {
            assert_eq!(k.module, kernel.module_name());
            assert_eq!(k.entries.len(), 1, "{k:?}");
            assert_eq!((k.backend.as_str(), k.target.as_str()), ("cpu", cpu.arch().as_str()));
            assert_eq!(k.key.len(), 64);
            assert_eq!(k.device, "cpu:0", "{k:?}");
        }
        assert!(!coverage.would_compile());
    }
    // A new process finds both in the cache folder, with or without --device.
    for extra in [&["--device", "cpu"][..], &[]] {
        let (code, text) = coverage_command(&cache, &manifest, extra);
        assert_eq!(code, Some(0), "{extra:?}: {text}");
        assert_eq!(text.lines().filter(|l| l.starts_with("disk ")).count(), 2, "{text}");
        assert!(text.contains("2 kernels for "), "{text}");
    }

    // A kernel stored nowhere: it would compile, and the command says so with its status.
    let mut file = std::fs::OpenOptions::new().append(true).open(&manifest).unwrap();
    let missing = format!(
        "jbm1\t{}\tcpu\t{}\tcovered_never\tcovered_never\tcompiled\n",
        "a".repeat(64),
        cpu.arch()
    );
    file.write_all(missing.as_bytes()).unwrap();
    // And kernels for devices this host lacks: another architecture, a backend none has.
    let elsewhere = format!(
        "jbm1\t{}\tcpu\tno-such-arch\tcovered_arch\tcovered_arch\tcompiled\n\
         jbm1\t{}\tnosuch\tsm_90\tcovered_backend\tcovered_backend\tcompiled\n",
        "b".repeat(64),
        "c".repeat(64)
    );
    file.write_all(elsewhere.as_bytes()).unwrap();
    for device in [Some(cpu), None] {
        let coverage = disk_cache::coverage(device, &manifest).unwrap();
        assert_eq!(coverage.count(CoverageSource::Compile), 1);
        assert_eq!(coverage.count(CoverageSource::Other), 2);
        assert!(coverage.would_compile());
        assert!(coverage.kernels[2].why.contains("in neither"), "{:?}", coverage.kernels[2]);
        assert_eq!(coverage.kernels[3].device, "", "{:?}", coverage.kernels[3]);
        if device.is_none() {
            let why = &coverage.kernels[3].why;
            assert!(why.contains("no cpu device of that architecture"), "{why}");
            let why = &coverage.kernels[4].why;
            assert!(why.contains("no such device") && why.contains("nosuch"), "{why}");
        }
    }
    let now = Counters::read().since(&before);
    assert_eq!((now.builds, now.misses), (0, 0), "the check compiled or looked up nothing");
    for extra in [&["--device", "cpu"][..], &[]] {
        let (code, text) = coverage_command(&cache, &manifest, extra);
        assert_eq!(code, Some(1), "one would compile: {text}");
        assert!(text.contains("compile  covered_never "), "{text}");
        assert!(text.contains("(in neither"), "{text}");
        assert!(text.contains("1 would compile, 2 for "), "{text}");
    }

    let (code, text) = coverage_command(&cache, &dir.join("absent"), &[]);
    assert_eq!(code, Some(2), "an unreadable manifest is an error: {text}");
    assert!(text.contains("absent"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}
