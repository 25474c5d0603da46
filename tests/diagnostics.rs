//! What a kernel's author is told: a misspelt or GPU-only function in a cpu body is a compile
//! error at the body's line (it was a symbol missing at load, naming a temporary file); a
//! function declared but defined nowhere is refused when the module is linked; the compiler's
//! warnings reach the build's event; a whole-source module's compile error shows at `prepare`.

mod common; // its temporary cache folder: the tests never write the user's

use jitbridge::*;
use std::sync::{Arc, Mutex};

fn kernel(name: &str, header: Option<&str>, body: &str) -> CustomKernel {
    common::vouched_kernel(&KernelSpec {
        name,
        inputs: &[("x", DType::F32)],
        outputs: &[("y", DType::F32)],
        header,
        body,
        options: CompileOptions { bounds_checks: true, ..Default::default() },
        ..Default::default()
    })
    .unwrap()
}

fn compile_error(k: &CustomKernel, device: Device) -> String {
    let err = k.prepare(device).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Compile, "{device:?}: {err}");
    err.message().to_string()
}

#[test]
fn a_misspelt_function_is_a_compile_error_at_the_body_line() {
    let _turn = common::serial();
    let k = kernel(
        "diag_misspelt",
        None,
        "float v = x[thread_index()];\ny[thread_index()] = expff(v);",
    );
    for device in common::cpu_and_gpu() {
        let message = compile_error(&k, device);
        assert!(message.contains("expff"), "{device:?}: {message}");
        // gcc/clang write "diag_misspelt.body:2:", NVRTC and hiprtc "diag_misspelt.body(2)".
        assert!(
            message.contains("diag_misspelt.body:2") || message.contains("diag_misspelt.body(2)"),
            "{device:?}: the first location is not the body's line: {message}"
        );
        assert!(!message.contains("dlopen") && !message.contains(".so"), "{message}");
    }
}

#[test]
fn a_gpu_only_function_on_the_cpu_is_a_compile_error_at_the_body_line() {
    let _turn = common::serial();
    let k = kernel("diag_gpu_only", None, "atomicAdd(&y[0], x[thread_index()]);");
    let message = compile_error(&k, Device::cpu().unwrap());
    assert!(message.contains("atomicAdd"), "{message}");
    assert!(message.contains("diag_gpu_only.body:1"), "{message}");
}

#[test]
fn a_declared_function_defined_nowhere_is_refused_at_the_build() {
    let _turn = common::serial();
    let k = kernel(
        "diag_undefined",
        Some("float scale_by_nothing(float v);"),
        "y[thread_index()] = scale_by_nothing(x[thread_index()]);",
    );
    let message = compile_error(&k, Device::cpu().unwrap());
    assert!(message.contains("scale_by_nothing"), "{message}");
}

#[test]
fn the_compilers_warnings_reach_the_build_event() {
    let _turn = common::serial();
    let seen: Arc<Mutex<Vec<CacheEvent>>> = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    jitbridge::set_event_callback(move |e| sink.lock().unwrap().push(e.clone())).unwrap();
    let salt = std::process::id();
    let noisy = kernel(
        "diag_warns",
        None,
        &format!("int z = {salt} / 0; (void)z;\ny[thread_index()] = x[thread_index()];"),
    );
    let quiet =
        kernel("diag_quiet", None, &format!("y[thread_index()] = x[thread_index()] + {salt}.0f;"));
    let cpu = Device::cpu().unwrap();
    noisy.prepare(cpu).unwrap();
    quiet.prepare(cpu).unwrap();
    jitbridge::clear_event_callback().unwrap();
    let events = std::mem::take(&mut *seen.lock().unwrap());
    let end = |name: &str| {
        events
            .iter()
            .find(|e| e.kind == CacheEventKind::BuildEnd && e.name.starts_with(name))
            .unwrap_or_else(|| panic!("no build end of {name}: {events:?}"))
            .message
            .clone()
    };
    let warned = end("diag_warns_");
    assert!(warned.contains("division by zero"), "{warned}");
    assert!(warned.contains("diag_warns.body:1"), "{warned}");
    assert_eq!(end("diag_quiet_"), "", "a clean build has no warnings");
}

const BROKEN_CPU: &str = "void entry(void **args, uint64_t threads) { not_a_statement }\n";
const BROKEN_GPU: &str = "extern \"C\" __global__ void entry(float *y) { not_a_statement }\n";
const FINE_CPU: &str = "void entry(void **args, uint64_t threads) { (void)args; (void)threads; }\n";
const FINE_GPU: &str = "extern \"C\" __global__ void entry(float *y) { (void)y; }\n";

fn source_module(name: &str, cpu: &str, gpu: &str, entries: &[&str]) -> SourceModule {
    let spec = SourceModuleSpec {
        name,
        cpu_source: Some(cpu),
        gpu_source: Some(gpu),
        entries,
        ..Default::default()
    };
    const ARGS: &[ArgDecl] = &[ArgDecl::Out(DType::F32)];
    // SAFETY: no launch is made; loading either source runs no code of its own (no
    // constructors, no static initialisers).
    unsafe { SourceModule::new_declared(&spec, &[Signature::new("entry", ARGS)]) }.unwrap()
}

#[test]
fn a_source_module_compile_error_shows_at_prepare() {
    let _turn = common::serial();
    let broken = source_module("diag_broken_module", BROKEN_CPU, BROKEN_GPU, &["entry"]);
    let fine = source_module("diag_fine_module", FINE_CPU, FINE_GPU, &["entry"]);
    let missing = source_module("diag_missing_entry", FINE_CPU, FINE_GPU, &["entry", "other"]);
    for device in common::cpu_and_gpu() {
        let err = broken.prepare(device).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Compile, "{device:?}: {err}");
        assert!(err.message().contains("not_a_statement"), "{err}");
        fine.prepare(device).unwrap();
        let err = missing.prepare(device).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Load, "{device:?}: {err}");
        assert!(err.message().contains("other"), "{err}");
    }
    // Nothing vouches for an undeclared module's load-time code: the safe prepare refuses it.
    let undeclared = SourceModule::new(&SourceModuleSpec {
        name: "diag_undeclared",
        cpu_source: Some(FINE_CPU),
        gpu_source: Some(FINE_GPU),
        entries: &["entry"],
        ..Default::default()
    })
    .unwrap();
    let err = undeclared.prepare(Device::cpu().unwrap()).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    // SAFETY: the source has no load-time code.
    unsafe { undeclared.prepare_unchecked(Device::cpu().unwrap()) }.unwrap();
}
