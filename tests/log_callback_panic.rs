//! A log closure that panics: the panic never unwinds into the C library (it is caught there),
//! the call that warned still succeeds, and later warnings still reach a closure.
//! One test in this binary: the idle cap is read once per process, from the environment.

use jitbridge::Device;
use std::sync::{Arc, Mutex};

#[test]
fn a_panicking_closure_loses_its_warning_only() {
    // SAFETY: the only test of this binary, before any other thread exists.
    unsafe { std::env::set_var("JITBRIDGE_IDLE_CAP", "plenty") };
    let calls = Arc::new(Mutex::new(0));
    let sink = calls.clone();
    jitbridge::set_log_callback(move |warning| {
        *sink.lock().unwrap() += 1;
        panic!("a logger that fails: {warning}");
    })
    .unwrap();
    // The warning (a bad JITBRIDGE_IDLE_CAP) fires while the devices are set up.
    let cpu = Device::cpu().expect("the call that warned still succeeds");
    assert_eq!(*calls.lock().unwrap(), 1, "the closure ran once");
    let input = jitbridge::Array::arange(cpu, 16, jitbridge::DType::F32).unwrap();
    let out = jitbridge::jit_race_probe_array(&input, 11).unwrap();
    assert!(jitbridge::race::probe_output_exact(&out.to_vec::<f32>().unwrap()));
    // The closure can still be replaced: nothing is left locked by the panic.
    jitbridge::clear_log_callback().unwrap();
}
