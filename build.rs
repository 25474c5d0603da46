//! Compiles the C library in cbridge/ with the system C compiler and links it statically.
//! GPU backends (features `cuda`, `rocm`, together or alone) need the vendor's headers to build;
//! their libraries are loaded at run time (cbridge/src/gpu/gpu_loader.c), never linked.

use std::collections::HashMap;
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Reads an environment variable and tells cargo to rebuild when it changes.
fn env_var(name: &str) -> Option<String> {
    println!("cargo:rerun-if-env-changed={name}");
    env::var(name).ok().filter(|v| !v.is_empty())
}

/// The `NAME = words` lines of cbridge/flags.mk, which cbridge/Makefile includes too.
fn flags_mk(path: &Path) -> HashMap<String, Vec<String>> {
    println!("cargo:rerun-if-changed={}", path.display());
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (name, words) = line
                .split_once('=')
                .filter(|(name, _)| !name.ends_with([':', '+', '?']))
                .unwrap_or_else(|| panic!("{}: `{line}` is not `NAME = words`", path.display()));
            (name.trim().to_string(), words.split_whitespace().map(String::from).collect())
        })
        .collect()
}

/// One variable of flags.mk; build.rs and flags.mk are one change, so a missing name is a bug.
fn mk_var<'a>(vars: &'a HashMap<String, Vec<String>>, name: &str) -> &'a [String] {
    vars.get(name).unwrap_or_else(|| panic!("cbridge/flags.mk has no {name}"))
}

/// -O and -g as the cargo profile asks (`opt-level`, `debug`), the way the cc crate reads them.
fn profile_flags() -> Vec<String> {
    let opt_level = env::var("OPT_LEVEL").unwrap_or_else(|_| "0".into());
    let mut flags = vec![format!("-O{opt_level}")];
    if !matches!(env::var("DEBUG").as_deref(), Ok("false" | "0" | "none") | Err(_)) {
        flags.push("-g".into());
    }
    flags
}

fn feature(name: &str) -> bool {
    env::var_os(format!("CARGO_FEATURE_{}", name.to_uppercase())).is_some()
}

/// The C sources, sorted so that builds are reproducible.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    files.sort();
    files
}

fn run(cmd: &mut Command) {
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (install a C compiler or set CC)"));
    assert!(status.success(), "{cmd:?} failed with {status}");
}

/// One GPU backend to build: cbridge/src/gpu/ is compiled once for each, with its own names.
struct Gpu {
    /// Defined for the whole library: this backend is built in.
    with: &'static str,
    /// Defined for this backend's compile of cbridge/src/gpu/ only.
    vendor: Vec<String>,
    /// Object file suffix, so the two compiles of one source do not collide.
    name: &'static str,
    include: PathBuf,
}

/// A toolkit folder given at build time is built into the library, which searches it at run
/// time: an absolute path only (a relative one would be searched under whatever folder the
/// program runs in), and one that can go into a C string literal as it is.
fn usable_toolkit_root(var: &str, root: &str) -> Result<PathBuf, String> {
    if !Path::new(root).is_absolute() {
        return Err(format!(
            "{var}={root} is a relative path: the toolkit folder is built into the library and \
             searched at run time, from whatever folder the program runs in; give an absolute path"
        ));
    }
    if root.chars().any(|c| c == '"' || c == '\\' || c.is_control()) {
        return Err(format!(
            "{var}={root:?} has a quote, backslash or control character; the toolkit folder is \
             built into the library as a C string: give a path without them"
        ));
    }
    Ok(PathBuf::from(root))
}

fn toolkit_root(vars: &[&str], defaults: &[&str], what: &str, probe: &str) -> PathBuf {
    for var in vars {
        if let Some(root) = env_var(var) {
            let root = usable_toolkit_root(var, &root).unwrap_or_else(|why| panic!("{why}"));
            assert!(
                root.join(probe).exists(),
                "{var}={} has no {probe}: point {var} at the {what} installation",
                root.display()
            );
            return root;
        }
    }
    for default in defaults {
        let root = PathBuf::from(default);
        if root.join(probe).exists() {
            return root;
        }
    }
    panic!(
        "the {what} headers were not found in {} (looked for {probe}); install the toolkit or set {}",
        defaults.join(", "),
        vars.join(" or ")
    );
}

fn cuda_toolkit() -> Gpu {
    let root = toolkit_root(&["CUDA_PATH"], &["/usr/local/cuda"], "CUDA", "include/cuda.h");
    Gpu {
        with: "JB_WITH_CUDA",
        // The toolkit's folder is where NVRTC is looked for last at run time.
        vendor: vec!["-DJB_VENDOR_CUDA".into(), format!("-DJB_CUDA_ROOT=\"{}\"", root.display())],
        name: "cuda",
        include: root.join("include"),
    }
}

fn rocm_toolkit() -> Gpu {
    let root = toolkit_root(
        &["ROCM_PATH", "HIP_PATH"],
        &["/opt/rocm", "/usr"],
        "ROCm (HIP)",
        "include/hip/hip_runtime_api.h",
    );
    Gpu {
        with: "JB_WITH_ROCM",
        vendor: vec![
            "-DJB_VENDOR_HIP".into(),
            "-D__HIP_PLATFORM_AMD__".into(),
            format!("-DJB_ROCM_ROOT=\"{}\"", root.display()),
        ],
        name: "rocm",
        include: root.join("include"),
    }
}

fn compile(program: &str, args: &[&str], flags: &[String], src: &Path, obj: &Path) {
    run(Command::new(program).args(args).args(flags).arg("-c").arg(src).arg("-o").arg(obj));
}

/// The Markdown pages the crate documentation includes (README.md as doctests, docs/KERNELS.md
/// as the `kernel_language` page), copied into OUT_DIR with one hidden line at the top of each
/// Rust example that turns the disk cache off: the examples compile kernels, and tests never
/// write the user's cache. The pages themselves stay free of that line.
fn doc_pages(manifest: &Path, out: &Path) {
    const SETUP: &str = "# unsafe { std::env::set_var(\"JITBRIDGE_DISK_CACHE\", \"off\") };";
    for page in ["README.md", "docs/KERNELS.md"] {
        let path = manifest.join(page);
        println!("cargo:rerun-if-changed={}", path.display());
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let mut copy = String::with_capacity(text.len() + 1024);
        for line in text.lines() {
            copy.push_str(line);
            copy.push('\n');
            if line == "```rust" {
                copy.push_str(SETUP);
                copy.push('\n');
            }
        }
        let name = Path::new(page).file_name().unwrap();
        std::fs::write(out.join(name), copy)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", out.join(name).display()));
    }
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    doc_pages(&manifest, &out);
    let cbridge = manifest.join("cbridge");
    println!("cargo:rerun-if-changed=cbridge/include");
    println!("cargo:rerun-if-changed=cbridge/src");
    let mk = flags_mk(&cbridge.join("flags.mk"));

    let mut gpus = Vec::new();
    if feature("cuda") {
        gpus.push(cuda_toolkit());
    }
    if feature("rocm") {
        gpus.push(rocm_toolkit());
    }

    let compiler = env_var("CC").unwrap_or_else(|| "cc".into());
    let mut compiler_words = compiler.split_whitespace();
    let program = compiler_words.next().expect("CC is empty");
    let compiler_args: Vec<&str> = compiler_words.collect();

    // As cbridge/Makefile orders them: the library's flags, then the caller's, which win.
    let mut flags = mk_var(&mk, "JB_CFLAGS").to_vec();
    flags.extend(profile_flags());
    if let Some(cflags) = env_var("CFLAGS") {
        flags.extend(cflags.split_whitespace().map(String::from));
    }
    flags.push(format!("-I{}", cbridge.join("include").display()));

    // Test-only: remove named locks to show that the concurrency tests catch the race. Only an
    // explicit `--cfg jitbridge_remove_lock="NAME"` in RUSTFLAGS does it (cargo hands it over as
    // CARGO_CFG_JITBRIDGE_REMOVE_LOCK), so no stray variable in a user's shell ever can.
    let mut lock_names: Vec<&str> =
        mk.keys().filter_map(|k| k.strip_prefix("JB_REMOVE_LOCK_")).collect();
    lock_names.sort();
    let quoted: Vec<String> = lock_names.iter().map(|n| format!("\"{n}\"")).collect();
    println!(
        "cargo::rustc-check-cfg=cfg(jitbridge_remove_lock, values(none(), {}))",
        quoted.join(", ")
    );
    if env_var("JITBRIDGE_REMOVE_LOCK").is_some() {
        println!(
            "cargo:warning=JITBRIDGE_REMOVE_LOCK is ignored: every lock is in this build (a test-only lock removal takes RUSTFLAGS='--cfg jitbridge_remove_lock=\"NAME\"')"
        );
    }
    let removed = env::var("CARGO_CFG_JITBRIDGE_REMOVE_LOCK").unwrap_or_default();
    for lock in removed.split(',').filter(|l| !l.is_empty()) {
        let Some([define]) = mk.get(&format!("JB_REMOVE_LOCK_{lock}")).map(Vec::as_slice) else {
            panic!(
                "--cfg jitbridge_remove_lock=\"{lock}\": expected one of {}",
                lock_names.join(", ")
            );
        };
        println!(
            "cargo:warning=--cfg jitbridge_remove_lock=\"{lock}\": this build has NO {lock} lock and races on purpose; never ship it"
        );
        flags.push(format!("-D{define}"));
    }

    for gpu in &gpus {
        flags.push(format!("-D{}", gpu.with));
    }
    // Every layer's folder but gpu/, which is compiled once per vendor below.
    let mut layers: Vec<PathBuf> = std::fs::read_dir(cbridge.join("src"))
        .unwrap_or_else(|e| panic!("cannot read cbridge/src: {e}"))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.is_dir() && !p.ends_with("gpu"))
        .collect();
    layers.sort();
    let files: Vec<PathBuf> = layers.iter().flat_map(|dir| sources(dir)).collect();

    let object = |src: &Path, suffix: &str| {
        let rel = src.strip_prefix(&cbridge).unwrap();
        out.join(format!(
            "{}{suffix}.o",
            rel.with_extension("").to_string_lossy().replace('/', "_")
        ))
    };
    let mut objects = Vec::new();
    for src in &files {
        let obj = object(src, "");
        compile(program, &compiler_args, &flags, src, &obj);
        objects.push(obj);
    }
    for gpu in &gpus {
        let mut gpu_flags = flags.clone();
        gpu_flags.extend(gpu.vendor.iter().cloned());
        gpu_flags.push(format!("-I{}", gpu.include.display()));
        for src in sources(&cbridge.join("src/gpu")) {
            let obj = object(&src, &format!(".{}", gpu.name));
            compile(program, &compiler_args, &gpu_flags, &src, &obj);
            objects.push(obj);
        }
    }
    let archive = out.join("libjitbridge_c.a");
    let _ = std::fs::remove_file(&archive);
    run(Command::new(env_var("AR").unwrap_or_else(|| "ar".into()))
        .arg("crs")
        .arg(&archive)
        .args(&objects));

    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=jitbridge_c");
    for word in mk_var(&mk, "JB_LDLIBS") {
        let lib = match word.as_str() {
            "-pthread" => "pthread",
            other => other.strip_prefix("-l").unwrap_or_else(|| {
                panic!("cbridge/flags.mk: JB_LDLIBS word `{other}` is neither -lNAME nor -pthread")
            }),
        };
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
    println!("cargo:include={}", cbridge.join("include").display());
}
