//! A GPU toolkit folder given at build time is built into the library, which searches it at run
//! time: a relative `CUDA_PATH` (`ROCM_PATH`, `HIP_PATH`) named a folder under wherever a program
//! later ran, and a library planted there was loaded (setuid hosts too). Both builds refuse one:
//! build.rs, run here as cargo runs it, and cbridge/Makefile. Each runs in a folder that holds
//! the relative toolkit's headers, so that only the refusal can stop it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The cases: the feature or make switch, the variable, the header the build looks for.
const CASES: [(&str, &str, &str); 3] = [
    ("cuda", "CUDA_PATH", "include/cuda.h"),
    ("rocm", "ROCM_PATH", "include/hip/hip_runtime_api.h"),
    ("rocm", "HIP_PATH", "include/hip/hip_runtime_api.h"),
];
const VARIABLES: [&str; 3] = ["CUDA_PATH", "ROCM_PATH", "HIP_PATH"];

/// A fresh folder holding toolkit-rel/ with every header a case looks for.
fn staged(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("jb-toolkit-root-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (_, _, header) in CASES {
        let header = dir.join("toolkit-rel").join(header);
        std::fs::create_dir_all(header.parent().unwrap()).unwrap();
        std::fs::write(header, "").unwrap();
    }
    dir
}

/// The newest compiled build script of this package: the one cargo built for this test. None
/// where this test runs away from its build (a test executable carried to another machine).
fn build_script() -> Option<PathBuf> {
    let build = std::env::current_exe().unwrap().parent()?.parent()?.join("build");
    let mut scripts: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&build)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("jitbridge-"))
        .map(|e| e.path().join("build-script-build"))
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .collect();
    scripts.sort();
    scripts.pop().map(|(_, p)| p)
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr)
}

/// Runs build.rs for `feature` with `var` = `root`, in `dir`; CC=false stops it at its first
/// compile should it get that far.
fn run_build_script(script: &Path, dir: &Path, feature: &str, var: &str, root: &str) -> Output {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let mut cmd = Command::new(script);
    for v in VARIABLES {
        cmd.env_remove(v);
    }
    cmd.current_dir(dir)
        .env("CARGO_MANIFEST_DIR", manifest)
        .env("OUT_DIR", &out)
        .env(format!("CARGO_FEATURE_{}", feature.to_uppercase()), "1")
        .env("CC", "false")
        .env(var, root)
        .output()
        .unwrap()
}

#[test]
fn build_rs_refuses_a_relative_toolkit_folder() {
    let Some(script) = build_script() else {
        return eprintln!("skipped: no build script beside this test executable");
    };
    let run_build_script = |dir: &Path, feature: &str, var: &str, root: &str| {
        run_build_script(&script, dir, feature, var, root)
    };
    let dir = staged("build-rs");
    for (feature, var, _) in CASES {
        let refused = run_build_script(&dir, feature, var, "toolkit-rel");
        let said = text(&refused);
        assert!(!refused.status.success(), "{var}=toolkit-rel was taken:\n{said}");
        assert!(said.contains(&format!("{var}=toolkit-rel is a relative path")), "{said}");
        // The same folder named absolutely passes that check and goes on to compile (CC=false).
        let absolute = dir.join("toolkit-rel");
        let taken = text(&run_build_script(&dir, feature, var, absolute.to_str().unwrap()));
        assert!(!taken.contains("relative path") && taken.contains("failed"), "{taken}");
    }
    let quoted = text(&run_build_script(&dir, "cuda", "CUDA_PATH", "/opt/cu\"da"));
    assert!(quoted.contains("has a quote, backslash or control character"), "{quoted}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_makefile_refuses_a_relative_toolkit_folder() {
    let makefile = Path::new(env!("CARGO_MANIFEST_DIR")).join("cbridge/Makefile");
    if Command::new("make").arg("--version").output().is_err() || !makefile.exists() {
        return eprintln!("skipped: no make, or no source tree, here");
    }
    let dir = staged("make");
    let make = |switch: &str, var: &str, root: &str| {
        let mut cmd = Command::new("make");
        for v in VARIABLES {
            cmd.env_remove(v);
        }
        // -n: the check is made while the Makefile is read; nothing is built either way.
        let output = cmd
            .current_dir(&dir)
            .arg("-n")
            .arg("-f")
            .arg(&makefile)
            .arg(format!("{}=1", switch.to_uppercase()))
            .arg(format!("{var}={root}"))
            .output()
            .unwrap();
        (output.status.success(), text(&output))
    };
    for (switch, var, _) in CASES {
        let (ok, said) = make(switch, var, "toolkit-rel");
        assert!(!ok, "make {var}=toolkit-rel was taken:\n{said}");
        assert!(
            said.contains(&format!("{var}=toolkit-rel is not a usable toolkit folder")),
            "{said}"
        );
        let absolute = dir.join("toolkit-rel");
        let (ok, said) = make(switch, var, absolute.to_str().unwrap());
        assert!(ok, "make {var}={} was refused:\n{said}", absolute.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
