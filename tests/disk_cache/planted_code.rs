//! Planted code never runs: a folder swapped for the attacker's with a forged entry, a TMPDIR
//! another user controls, and a setuid host that must take no file, library or compiler from its
//! caller's environment.

use crate::{
    CHDIR, FIRST, GO, child_command, child_command_of, entry_name, fresh_dir, is_root, parse,
    wait_for,
};
use std::path::Path;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use std::time::Instant;

const FNV_SEED: u64 = 0xcbf29ce484222325;

fn fnv1a64(data: &[u8], seed: u64) -> u64 {
    data.iter().fold(seed, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3))
}

/// What an attacker plants: a genuine entry's header and key (keys are not secret: they run the
/// same kernel) around their own payload, with the checksum recomputed (it is not keyed).
fn forge_entry(genuine: &[u8], payload: &[u8]) -> Vec<u8> {
    let key_bytes = u32::from_le_bytes(genuine[12..16].try_into().unwrap()) as usize;
    let key = &genuine[32..32 + key_bytes];
    let mut forged = genuine[..16].to_vec();
    forged.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    forged.extend_from_slice(&fnv1a64(payload, fnv1a64(key, FNV_SEED)).to_le_bytes());
    forged.extend_from_slice(key);
    forged.extend_from_slice(payload);
    forged
}

/// A shared object whose constructor writes `marker`: loading it is running the attacker's code.
fn planted_shared_object(dir: &Path, marker: &Path) -> Vec<u8> {
    let source = dir.join("planted.c");
    std::fs::write(
        &source,
        format!(
            "#include <stdio.h>\n__attribute__((constructor)) static void planted(void) {{\n\
             FILE *f = fopen(\"{}\", \"w\"); if (f) {{ fputs(\"ran\", f); fclose(f); }} }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let object = dir.join("planted.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&object)
        .arg(&source)
        .status()
        .unwrap();
    assert!(status.success(), "cannot build the planted shared object");
    std::fs::read(object).unwrap()
}

enum Swap {
    /// The folder's parent is ours; the folder is swapped after setup. The held handle wins.
    AfterSetup,
    /// The folder sits under another user's (nobody's) folder, who swaps it.
    ForeignParent,
    /// HOME points into another user's home (as with `sudo -E`).
    ForeignHome,
    /// A relative JITBRIDGE_CACHE_DIR, and the host changes directory before its first compile.
    RelativeThenChdir,
}

/// The swap attack: after the library has chosen (and checked) its folder, whoever controls a
/// parent puts a folder of their own in its place with a forged entry for the next kernel. The
/// forged entry's shared object writes a marker when loaded; it must never be written.
fn swap_attack(name: &str, swap: Swap) {
    use std::os::unix::fs::PermissionsExt;
    let base = fresh_dir(name);
    let attacker = base.join("attacker");
    std::fs::create_dir_all(&attacker).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let marker = attacker.join("marker");
    let (entry, genuine) = entry_name(51);
    let forged = forge_entry(&genuine, &planted_shared_object(&attacker, &marker));
    let cache = match swap {
        Swap::ForeignHome => base.join(".cache/jitbridge"),
        _ => base.join("cache"),
    };
    if matches!(swap, Swap::ForeignParent | Swap::ForeignHome) {
        std::os::unix::fs::chown(&base, Some(65534), Some(65534)).unwrap();
    }
    let go = attacker.join("go");
    let mut cmd = child_command(&cache, "51");
    cmd.env(FIRST, "50").env(GO, &go);
    match swap {
        Swap::ForeignHome => {
            cmd.env_remove("JITBRIDGE_CACHE_DIR").env_remove("XDG_CACHE_HOME").env("HOME", &base);
        }
        Swap::RelativeThenChdir => {
            cmd.env("JITBRIDGE_CACHE_DIR", "cache").current_dir(&base).env(CHDIR, &attacker);
        }
        _ => {}
    }
    let child = cmd.spawn().unwrap();
    wait_for(&attacker.join("go.ready"));
    let planted = match swap {
        Swap::RelativeThenChdir => attacker.join("cache"),
        _ => {
            if cache.exists() {
                std::fs::rename(&cache, base.join("moved-away")).unwrap();
            }
            cache.clone()
        }
    };
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(planted.join(&entry), &forged).unwrap();
    std::fs::set_permissions(planted.join(&entry), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&go, b"").unwrap();
    let report = parse(child.wait_with_output().unwrap());
    assert!(!marker.exists(), "{name}: the planted shared object ran\n{}", report.stderr);
    if matches!(swap, Swap::ForeignParent | Swap::ForeignHome) {
        assert!(report.stderr.contains("refusing the cache folder"), "{}", report.stderr);
        assert!(report.stderr.contains(base.to_str().unwrap()), "{}", report.stderr);
        assert!(report.stderr.contains("owned by another user"), "{}", report.stderr);
        assert!(report.stderr.contains("fix: "), "{}", report.stderr);
    } else {
        assert_eq!(report.disk_hits, 0, "{name}: a planted entry was loaded");
    }
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn swap_after_setup_loads_nothing_planted() {
    swap_attack("swap-held", Swap::AfterSetup);
}

#[test]
fn relative_cache_dir_then_chdir_loads_nothing_planted() {
    swap_attack("swap-relative", Swap::RelativeThenChdir);
}

#[test]
fn folder_under_another_users_folder_is_refused() {
    if !is_root() {
        eprintln!("skipped: a folder of another user needs root to make");
        return;
    }
    swap_attack("swap-foreign", Swap::ForeignParent);
}

#[test]
fn home_of_another_user_is_refused() {
    if !is_root() {
        eprintln!("skipped: a home of another user needs root to make");
        return;
    }
    swap_attack("swap-home", Swap::ForeignHome);
}

/// The cpu backend compiles and dlopens in a private folder under TMPDIR, by path. When TMPDIR
/// sits in a folder another user controls (`sudo -E` keeps it), that user swaps the private
/// folder for one of their own and rewrites each kernel source before the compiler reads it:
/// their constructor ran as root. Such a TMPDIR is refused now, with a warning naming the folder
/// and the fix, and the private folder is made in the cache folder's tmp/ instead.
#[test]
fn private_folder_under_another_users_tmpdir_runs_nothing_planted() {
    use std::os::unix::fs::PermissionsExt;
    if !is_root() {
        eprintln!("skipped: a folder of another user needs root to make");
        return;
    }
    let base = fresh_dir("tmpdir-swap");
    let tmpdir = base.join("tmp");
    std::fs::create_dir_all(&tmpdir).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&tmpdir, Some(65534), Some(65534)).unwrap();
    let marker = base.join("marker");
    let evil = format!(
        "#include <stdio.h>\n__attribute__((constructor)) static void planted(void) {{\n\
         FILE *f = fopen(\"{}\", \"w\"); if (f) {{ fputs(\"ran\", f); fclose(f); }} }}\n",
        marker.display()
    );
    let go = base.join("go");
    let mut cmd = child_command(&base.join("cache"), "try:81");
    let child = cmd.env(FIRST, "80").env(GO, &go).env("TMPDIR", &tmpdir).spawn().unwrap();
    let ready = base.join("go.ready");
    let start = Instant::now();
    while !ready.exists() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(5));
    }
    // The attacker (owner of TMPDIR) swaps the private folder for one of their own.
    let private = std::fs::read_dir(&tmpdir).unwrap().filter_map(|e| e.ok()).map(|e| e.path());
    let private: Vec<PathBuf> =
        private.filter(|p| p.to_string_lossy().contains("jitbridge-")).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut rewriter = None;
    if let [private] = &private[..] {
        std::fs::rename(private, tmpdir.join("moved-away")).unwrap();
        std::fs::create_dir(private).unwrap();
        std::fs::set_permissions(private, std::fs::Permissions::from_mode(0o777)).unwrap();
        let (private, stop, evil) = (private.clone(), stop.clone(), evil.clone());
        rewriter = Some(std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for entry in std::fs::read_dir(&private).into_iter().flatten().flatten() {
                    let path = entry.path();
                    let name = path.file_name().unwrap().to_string_lossy().into_owned();
                    if name.starts_with("kernel-") && name.ends_with(".c") {
                        let staged = private.join("staged");
                        std::fs::write(&staged, &evil).unwrap();
                        let _ = std::fs::rename(&staged, &path);
                    }
                }
            }
        }));
    }
    std::fs::write(&go, b"").unwrap();
    let output = child.wait_with_output().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swapped = rewriter.is_some();
    if let Some(rewriter) = rewriter {
        rewriter.join().unwrap();
    }
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!marker.exists(), "the attacker's code ran in the root process\n{stdout}\n{stderr}");
    assert!(!swapped, "the private folder was made in TMPDIR, where its owner swapped it");
    assert!(stdout.contains("TRY ok"), "{stdout}\n{stderr}");
    assert!(stderr.contains(tmpdir.to_str().unwrap()), "{stderr}");
    assert!(stderr.contains("owned by another user"), "{stderr}");
    assert!(stderr.contains("fix: choose a folder of your own with TMPDIR"), "{stderr}");
    assert_eq!(stderr.matches("compiling in").count(), 1, "one warning: {stderr}");
    std::fs::remove_dir_all(&base).unwrap();
}

/// A setuid-nobody copy of this test binary at base/host, or None (with why) where setuid does
/// not take effect here (a nosuid mount, no_new_privs).
fn setuid_copy(base: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let host = base.join("host");
    std::fs::copy(std::env::current_exe().unwrap(), &host).unwrap();
    std::os::unix::fs::chown(&host, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o4755)).unwrap();
    // Another test thread that forks while the copy is open for writing holds that descriptor
    // until its child execs: until then running the copy fails with "Text file busy".
    let output = (0..200)
        .map(|_| child_command_of(&host, &base.join("cache"), "euid").output())
        .find(|run| match run {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(10));
                false
            }
            _ => true,
        })
        .expect("the copy stayed busy for 2 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    if stdout.contains("EUID 65534") {
        return Some(host);
    }
    eprintln!("skipped: setuid does not take effect here ({stdout})");
    None
}

/// A setuid host must not take file locations from its caller: JITBRIDGE_SAVE_SOURCE used to be
/// read with getenv, so the caller had the elevated process write (O_TRUNC) into any folder.
/// As root, a setuid-nobody copy of this test is the elevated host (AT_SECURE is set).
#[test]
fn setuid_host_takes_no_save_folder_from_its_caller() {
    use std::os::unix::fs::PermissionsExt;
    if !is_root() {
        eprintln!("skipped: a setuid copy needs root to make");
        return;
    }
    let base = fresh_dir("setuid");
    let saved = base.join("saved");
    std::fs::create_dir_all(&saved).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&saved, std::fs::Permissions::from_mode(0o777)).unwrap();
    let Some(host) = setuid_copy(&base) else {
        return std::fs::remove_dir_all(&base).unwrap();
    };
    let mut cmd = child_command_of(&host, &base.join("cache"), "94");
    let output = cmd.env("JITBRIDGE_SAVE_SOURCE", &saved).output().unwrap();
    let report = parse(output);
    assert_eq!(report.builds, 1, "the kernel ran");
    let written: Vec<_> = std::fs::read_dir(&saved).unwrap().flatten().map(|e| e.path()).collect();
    assert!(written.is_empty(), "the setuid host wrote where its caller said: {written:?}");
    std::fs::remove_dir_all(&base).unwrap();
}

/// The same for the GPU backends' toolkit folder: CUDA_PATH (ROCM_PATH, HIP_PATH) used to be
/// read with getenv, so a setuid host dlopened its caller's libcuda.so.1: the caller's code.
#[cfg(any(feature = "cuda", feature = "rocm"))]
#[test]
fn setuid_host_loads_no_gpu_library_from_its_caller() {
    use std::os::unix::fs::PermissionsExt;
    if !is_root() {
        eprintln!("skipped: a setuid copy needs root to make");
        return;
    }
    let base = fresh_dir("setuid-gpu");
    std::fs::create_dir_all(&base).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let Some(host) = setuid_copy(&base) else {
        return std::fs::remove_dir_all(&base).unwrap();
    };
    let open = base.join("open"); // the elevated host runs as nobody: let it write the marker
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let marker = open.join("marker");
    let planted = planted_shared_object(&base, &marker);
    let mut cmd = child_command_of(&host, &base.join("cache"), "gpu");
    for (var, names) in [
        ("CUDA_PATH", &["libcuda.so.1"][..]),
        ("ROCM_PATH", &["libamdhip64.so", "libamdhip64.so.5", "libamdhip64.so.6"][..]),
        ("HIP_PATH", &["libamdhip64.so.7"][..]),
    ] {
        let lib = base.join(var).join("lib64");
        std::fs::create_dir_all(&lib).unwrap();
        for name in names {
            std::fs::write(lib.join(name), &planted).unwrap();
        }
        std::os::unix::fs::symlink(&lib, base.join(var).join("lib")).unwrap();
        cmd.env(var, base.join(var));
    }
    parse(cmd.output().unwrap());
    assert!(!marker.exists(), "the setuid host loaded its caller's library");
    std::fs::remove_dir_all(&base).unwrap();
}

/// The same for the compiler: CC used to be read with getenv, so a setuid host ran its caller's
/// program (at `--version` and at every compile) with its own privileges.
#[test]
fn setuid_host_runs_no_compiler_of_its_caller() {
    use std::os::unix::fs::PermissionsExt;
    if !is_root() {
        eprintln!("skipped: a setuid copy needs root to make");
        return;
    }
    let base = fresh_dir("setuid-cc");
    let (open, cc) = (base.join("open"), base.join("cc"));
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let marker = open.join("marker");
    std::fs::write(&cc, format!("#!/bin/sh\necho ran > {}\nexec cc \"$@\"\n", marker.display()))
        .unwrap();
    std::fs::set_permissions(&cc, std::fs::Permissions::from_mode(0o755)).unwrap();
    let Some(host) = setuid_copy(&base) else {
        return std::fs::remove_dir_all(&base).unwrap();
    };
    let mut cmd = child_command_of(&host, &base.join("cache"), "97");
    let report = parse(cmd.env("CC", &cc).output().unwrap());
    assert_eq!(report.builds, 1, "the kernel ran");
    assert!(!marker.exists(), "the setuid host ran its caller's compiler");
    std::fs::remove_dir_all(&base).unwrap();
}
