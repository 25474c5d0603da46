#![cfg(any(feature = "cuda", feature = "rocm"))]
//! Two GPUs never share a module: one probe variant launched on both builds two modules (the
//! keys' device prefixes differ), with threads on both devices at once.

mod common;

use jitbridge::{Counters, Device, DeviceKind, race};

#[test]
fn one_variant_on_two_gpus_builds_two_modules() {
    let _turn = common::serial();
    let gpus = Device::count(DeviceKind::Gpu).unwrap();
    if gpus < 2 {
        eprintln!("skipped: this test needs two GPUs, and {gpus} is present");
        return;
    }
    let devices = [Device::gpu(0).unwrap(), Device::gpu(1).unwrap()];
    assert_ne!(devices[0].index(), devices[1].index());
    Counters::reset();
    let variant = 5_000_000;
    let outcomes: Vec<Vec<race::ThreadOutcome>> = std::thread::scope(|s| {
        let runs: Vec<_> = devices
            .iter()
            .map(|&d| {
                s.spawn(move || {
                    race::first_launch_round(d, jitbridge::jit_race_probe_array, &[variant; 8])
                        .expect("every probe thread started")
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for (device, per_thread) in outcomes.iter().enumerate() {
        for (thread, outcome) in per_thread.iter().enumerate() {
            assert!(matches!(outcome, Ok(true)), "device {device} thread {thread}: {outcome:?}");
        }
    }
    let counters = Counters::read();
    assert_eq!(counters.builds, 2, "one module per device");
    assert_eq!(counters.build_failures, 0);
}
