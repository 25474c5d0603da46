//! Warnings reach a Rust closure: a refused cache folder's warning names the folder; replacing
//! the closure from inside itself is refused; the C library's version is the crate's.
//! One test in this binary: the cache folder is chosen once per process, from the environment.

use jitbridge::{CustomKernel, DType, Device, KernelSpec};
use std::ffi::CStr;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};

#[test]
fn warnings_reach_the_closure_and_versions_agree() {
    // SAFETY: no other thread runs yet, and nothing has read the environment.
    let version = unsafe { CStr::from_ptr(jitbridge::ffi::jb_version()) };
    assert_eq!(version.to_str().unwrap(), env!("CARGO_PKG_VERSION"), "header and Cargo.toml");

    let dir = std::env::temp_dir().join(format!("jb-log-callback-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Writable by others: the disk cache must refuse it, with one warning.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    // SAFETY: the only test of this binary, before any other thread exists.
    unsafe {
        std::env::set_var("JITBRIDGE_CACHE_DIR", &dir);
        std::env::remove_var("JITBRIDGE_DISK_CACHE");
    }

    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let nested = Arc::new(Mutex::new(None));
    let (sink, nested_sink) = (seen.clone(), nested.clone());
    jitbridge::set_log_callback(move |warning| {
        sink.lock().unwrap().push(warning.to_string());
        *nested_sink.lock().unwrap() = Some(jitbridge::clear_log_callback());
    })
    .unwrap();

    // SAFETY: the body copies one element and subscripts its arrays.
    let kernel = unsafe {
        CustomKernel::new(&KernelSpec {
            name: "log_callback_test",
            inputs: &[("inp", DType::F32)],
            outputs: &[("out", DType::F32)],
            body: "out[thread_index()] = inp[thread_index()];",
            ..Default::default()
        })
    }
    .unwrap();
    kernel.prepare(Device::cpu().unwrap()).unwrap();
    jitbridge::clear_log_callback().unwrap();

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "one warning: {seen:?}");
    assert!(seen[0].contains(dir.to_str().unwrap()), "{:?} names the folder", seen[0]);
    assert!(seen[0].contains("writable by group or others"), "{:?}", seen[0]);
    let nested = nested.lock().unwrap().clone().expect("the closure ran");
    assert!(nested.is_err(), "replacing the callback from inside it must fail");
    std::fs::remove_dir_all(&dir).unwrap();
}
