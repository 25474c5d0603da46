#![cfg(any(feature = "cuda", feature = "rocm"))]
//! Two GPUs never share a module: one probe variant launched on both builds two modules (the
//! keys' device prefixes differ), with threads on both devices at once. One kernel object is
//! configured once on each device it runs on: the cpu, a GPU, and a second GPU where there is one
//! (cbridge's test_cache_paths does the same with two cpu devices, on any machine).

mod common;

use jitbridge::{
    Array, CompileOptions, Counters, DType, Device, DeviceKind, KernelConfig, KernelSpec,
    LaunchShape, race,
};
use std::sync::{Arc, Mutex};

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

/// One kernel object with a counting configure hook, launched on the cpu, gpu:0 and (where
/// there is one) gpu:1, twice each: the hook runs once per device, for that device, and every
/// launch computes right.
#[test]
fn one_kernel_object_is_configured_once_on_each_device() {
    let _turn = common::serial();
    let gpus = Device::count(DeviceKind::Gpu).unwrap();
    if gpus == 0 {
        eprintln!("skipped: no GPU here, and the cpu alone is one device");
        return;
    }
    if gpus < 2 {
        eprintln!("the cpu and gpu:0 only: a second GPU is skipped, {gpus} is present");
    }
    let mut devices = vec![Device::cpu().unwrap()];
    devices.extend((0..gpus.min(2) as i32).map(|ordinal| Device::gpu(ordinal).unwrap()));
    let seen: Arc<Mutex<Vec<i32>>> = Arc::default(); // the device index of each hook call
    let log = seen.clone();
    let kernel = common::vouched_kernel(&KernelSpec {
        name: "configured_per_device",
        inputs: &[("x", DType::F32)],
        outputs: &[("y", DType::F32)],
        body: "y[thread_index()] = x[thread_index()] * 2.0f + 1.0f;",
        options: CompileOptions { bounds_checks: true, ..Default::default() },
        configure: Some(Arc::new(move |device: Device| {
            log.lock().unwrap().push(device.index());
            // A block size of the device's own: 64, 96, 128.
            Some(KernelConfig {
                threads_per_block: 32 * (device.index() as u32 % 3 + 2),
                ..Default::default()
            })
        })),
        ..Default::default()
    })
    .unwrap();
    for &device in &devices {
        let x = Array::arange(device, 300, DType::F32).unwrap();
        for round in 0..2 {
            let y = kernel.launch(&[&x], &[&[300]], LaunchShape::Threads(300)).unwrap();
            let values = y[0].to_vec::<f32>().unwrap();
            let exact = values.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32 + 1.0);
            assert!(exact, "{device:?}, launch {round}: wrong output");
        }
    }
    let mut calls = seen.lock().unwrap().clone();
    calls.sort_unstable();
    let mut want: Vec<i32> = devices.iter().map(|d| d.index()).collect();
    want.sort_unstable();
    assert_eq!(
        calls, want,
        "configure hook calls by device index: once per device expected (a device that shares \
         another's configure state is never configured)"
    );
}
