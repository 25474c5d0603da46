//! The module cache's contract beyond the race scenarios: failed builds, the configure hook,
//! bad probe inputs, streams and early frees. cpu backend.

mod common;

use jitbridge::{
    Array, CompileOptions, Counters, DType, Device, ErrorCode, KernelConfig, KernelSpec,
    LaunchShape, jit_race_probe_array, streams,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

fn cpu() -> Device {
    Device::cpu().unwrap()
}

#[test]
fn failed_build_inserts_nothing_and_retries_once_forgotten() {
    let _turn = common::serial();
    let dir = std::env::temp_dir().join(format!("jb-retry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let header_path = dir.join("value.h");
    let _ = std::fs::remove_file(&header_path);
    let header = format!("#include \"{}\"", header_path.display());
    let kernel = common::vouched_kernel(&KernelSpec {
        name: "retry_after_failure",
        inputs: &[("x", DType::F32)],
        outputs: &[("y", DType::F32)],
        body: "y[thread_index()] = x[thread_index()] + JB_RETRY_VALUE;",
        // An #include: so not bounds-checked (such a kernel refuses one), launched unchecked.
        header: Some(&header),
        ..Default::default()
    })
    .unwrap();
    let x = Array::arange(cpu(), 4, DType::F32).unwrap();
    // SAFETY: 4 threads, and the body reads x[i] and writes y[i] of 4 elements each.
    let launch = || unsafe { kernel.launch_unchecked(&[&x], &[&[4]], LaunchShape::Threads(4)) };

    let before = Counters::read();
    let err = launch().unwrap_err();
    assert_eq!(err.code(), ErrorCode::Compile, "{err}");
    assert!(err.message().contains("value.h"), "the compiler's log reaches the caller: {err}");
    let delta = Counters::read().since(&before);
    assert_eq!((delta.builds, delta.build_failures), (0, 1));

    std::fs::write(&header_path, "#define JB_RETRY_VALUE 10.0f\n").unwrap();
    // A rejection is remembered: the same error, without the compiler, until forgotten.
    let again = launch().unwrap_err();
    assert_eq!(again.message(), err.message());
    jitbridge::forget_build_failures();
    let y = launch().unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), [10.0, 11.0, 12.0, 13.0]);
    assert_eq!(Counters::read().since(&before).builds, 1, "the same key built on retry");
    std::fs::remove_dir_all(&dir).unwrap();
}

static CPU_HOOK_CALLS: AtomicUsize = AtomicUsize::new(0);
#[cfg(any(feature = "cuda", feature = "rocm"))]
static GPU_HOOK_CALLS: AtomicUsize = AtomicUsize::new(0);

fn slow_hook(calls: &AtomicUsize) -> Option<KernelConfig> {
    calls.fetch_add(1, Ordering::SeqCst);
    // Holds the window open so that unlocked callers would surely overlap.
    std::thread::sleep(std::time::Duration::from_millis(20));
    Some(KernelConfig { threads_per_block: 64, shared_memory_bytes: 0 })
}

/// 16 threads first-launch one kernel behind a barrier; its configure hook must run once.
fn configure_race(device: Device, hook: jitbridge::ConfigureHook, calls: &AtomicUsize) {
    let _turn = common::serial();
    let kernel = common::vouched_kernel(&KernelSpec {
        name: "configured_once",
        inputs: &[("inp", DType::F32)],
        outputs: &[("out", DType::F32)],
        body: jitbridge::sys_tools::probe_body(),
        header: None,
        configure: Some(hook),
        ..Default::default()
    })
    .unwrap();
    let threads = 16;
    let barrier = Arc::new(Barrier::new(threads));
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (barrier, kernel) = (barrier.clone(), &kernel);
            s.spawn(move || {
                let x = Array::arange(device, 1000, DType::F32).unwrap();
                barrier.wait();
                // SAFETY: the probe's body: 1000 threads, each its own element of 1000.
                let y = unsafe {
                    kernel.launch_unchecked(&[&x], &[&[1000]], LaunchShape::Threads(1000))
                };
                let y = y.unwrap();
                assert!(jitbridge::race::probe_output_exact(&y[0].to_vec::<f32>().unwrap()));
            });
        }
    });
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the configure hook ran more than once");
}

#[test]
fn configure_hook_raced_by_many_threads_runs_once() {
    configure_race(cpu(), Arc::new(|_| slow_hook(&CPU_HOOK_CALLS)), &CPU_HOOK_CALLS);
}

#[cfg(any(feature = "cuda", feature = "rocm"))]
#[test]
fn configure_hook_raced_by_many_threads_runs_once_on_gpu() {
    configure_race(
        Device::gpu(0).unwrap(),
        Arc::new(|_| slow_hook(&GPU_HOOK_CALLS)),
        &GPU_HOOK_CALLS,
    );
}

#[test]
fn bad_probe_inputs_give_clear_errors_and_change_nothing() {
    let _turn = common::serial();
    let empty = Array::arange(cpu(), 0, DType::F32).unwrap();
    let big = Array::arange(cpu(), 1025, DType::F32).unwrap();
    let ints = Array::arange(cpu(), 8, DType::I32).unwrap();
    let fine = Array::arange(cpu(), 8, DType::F32).unwrap();
    let before = Counters::read();
    let cases: [(&Array, i32, ErrorCode, &str); 4] = [
        (&empty, 1, ErrorCode::InvalidArgument, "1 to 1024"),
        (&big, 1, ErrorCode::InvalidArgument, "1 to 1024"),
        (&ints, 1, ErrorCode::Shape, "f32"),
        (&fine, -3, ErrorCode::InvalidArgument, ">= 0"),
    ];
    for (input, variant, code, needle) in cases {
        let err = jit_race_probe_array(input, variant).unwrap_err();
        assert_eq!(err.code(), code, "{err}");
        assert!(err.message().contains(needle), "'{needle}' not in: {err}");
    }
    let err = jitbridge::rocm_faults::jit_race_probe_array(&fine, 1).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unsupported);
    assert!(err.message().contains("ROCm"), "{err}");
    assert_eq!(Counters::read(), before, "a bad input changed the counters");
}

/// The probe is queued behind a slow kernel; its input is dropped and a new array of the same
/// size is written at once. Without the launch's hold on the input buffer, the new array would
/// take that buffer from the idle cache and the probe would read its values.
#[test]
fn dropping_inputs_while_the_kernel_is_queued_is_safe() {
    let _turn = common::serial();
    let stream = streams::new_thread_local_generation_stream(cpu()).unwrap();
    let _default = streams::install_thread_local_default_stream(&stream).unwrap();
    let spinner = common::vouched_kernel(&KernelSpec {
        name: "keeps_the_stream_busy",
        inputs: &[("inp", DType::F32)],
        outputs: &[("out", DType::F32)],
        body: "volatile float acc = 0.0f;\n\
               for (long i = 0; i < 40000000; i++) acc += 1.0f;\n\
               out[thread_index()] = inp[thread_index()] + (acc > 0.0f ? 0.0f : 1.0f);",
        ..Default::default()
    })
    .unwrap();
    let one = Array::from_slice(cpu(), &[0.0f32], &[1]).unwrap();
    // SAFETY: one thread, element 0 of two one-element arrays.
    let spin = || unsafe { spinner.launch_unchecked(&[&one], &[&[1]], LaunchShape::Threads(1)) };
    spin().unwrap()[0].eval().unwrap();
    for round in 0..3 {
        let busy = spin().unwrap();
        let x = Array::arange(cpu(), 1024, DType::F32).unwrap();
        let y = jit_race_probe_array(&x, 3_000_000).unwrap();
        drop(x);
        let overwrite = Array::from_slice(cpu(), &[-1.0f32; 1024], &[1024]).unwrap();
        assert!(
            jitbridge::race::probe_output_exact(&y.to_vec::<f32>().unwrap()),
            "round {round}: the queued probe read a buffer reused after its input was dropped"
        );
        drop((busy, overwrite));
    }
}

#[test]
fn one_name_with_two_bodies_is_two_modules() {
    let _turn = common::serial();
    let spec = |body| KernelSpec {
        name: "same_name",
        inputs: &[("x", DType::F32)],
        outputs: &[("y", DType::F32)],
        body,
        options: CompileOptions { bounds_checks: true, ..Default::default() },
        ..Default::default()
    };
    let plus =
        common::vouched_kernel(&spec("y[thread_index()] = x[thread_index()] + 1.0f;")).unwrap();
    let times =
        common::vouched_kernel(&spec("y[thread_index()] = x[thread_index()] * 3.0f;")).unwrap();
    assert_ne!(plus.module_name(), times.module_name());
    let x = Array::from_slice(cpu(), &[1.0f32, 2.0], &[2]).unwrap();
    let a = plus.launch(&[&x], &[&[2]], LaunchShape::Threads(2)).unwrap();
    let b = times.launch(&[&x], &[&[2]], LaunchShape::Threads(2)).unwrap();
    assert_eq!(a[0].to_vec::<f32>().unwrap(), [2.0, 3.0]);
    assert_eq!(b[0].to_vec::<f32>().unwrap(), [3.0, 6.0]);
}

#[test]
fn names_that_are_not_identifiers_are_refused() {
    for bad in ["", "9lives", "a-b", "x y", "../x", "for", "jb_internal", "caf\u{e9}"] {
        let err = common::vouched_kernel(&KernelSpec {
            name: "named_ok",
            inputs: &[(bad, DType::F32)],
            outputs: &[("y", DType::F32)],
            body: "",
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{bad:?}: {err}");
    }
}

#[test]
fn hits_of_exited_threads_still_count_with_and_without_the_lookaside() {
    let _turn = common::serial();
    let x = Array::arange(cpu(), 16, DType::F32).unwrap();
    jit_race_probe_array(&x, 3_100_000).unwrap().eval().unwrap();
    for lookaside in [true, false] {
        jitbridge::set_lookaside_enabled(lookaside);
        let before = Counters::read();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let x = Array::arange(cpu(), 16, DType::F32).unwrap();
                    for _ in 0..10 {
                        let y = jit_race_probe_array(&x, 3_100_000).unwrap();
                        assert!(jitbridge::race::probe_output_exact(&y.to_vec::<f32>().unwrap()));
                    }
                });
            }
        });
        let delta = Counters::read().since(&before);
        assert_eq!((delta.hits, delta.misses, delta.builds), (40, 0, 0), "lookaside {lookaside}");
    }
    jitbridge::set_lookaside_enabled(true);
}

#[test]
fn default_stream_guards_may_be_dropped_out_of_order() {
    let _turn = common::serial();
    let first = jitbridge::Stream::new(cpu()).unwrap();
    let second = jitbridge::Stream::new(cpu()).unwrap();
    let first_guard = streams::install_thread_local_default_stream(&first).unwrap();
    let second_guard = streams::install_thread_local_default_stream(&second).unwrap();
    drop(first_guard); // out of order: `second` stays the default
    drop(first); // no longer installed anywhere, so it may go
    let x = Array::arange(cpu(), 8, DType::F32).unwrap();
    assert!(jitbridge::race::probe_output_exact(
        &jit_race_probe_array(&x, 3_200_000).unwrap().to_vec::<f32>().unwrap()
    ));
    drop(second_guard); // must not bring `first` back
    let y = Array::arange(cpu(), 8, DType::F32).unwrap();
    assert!(jitbridge::race::probe_output_exact(
        &jit_race_probe_array(&y, 3_200_000).unwrap().to_vec::<f32>().unwrap()
    ));
}
