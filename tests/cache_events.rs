//! The event closure sees each slow-path event of a build with its module, key, device, thread
//! and the thread's tag; memory hits are never events; a panicking closure loses its event only;
//! the closure may launch kernels (their own events do not recurse into it), cannot replace
//! itself, and is dropped once replaced; thread tags are checked.

mod common;

use jitbridge::{CacheEvent, CacheEventKind, CustomKernel, DType, Device, ErrorCode, KernelSpec};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A kernel no other process of this run has built: its body carries `salt`.
fn fresh_kernel(name: &str, salt: f32) -> CustomKernel {
    let body = format!("out[thread_index()] = inp[thread_index()] + {salt:.6}f;");
    common::f32_kernel(name, &body)
}

fn salt() -> f32 {
    (std::process::id() % 100_000) as f32 + 0.5
}

/// This thread's id as the kernel knows it: /proc/thread-self is "PID/task/TID".
fn this_thread_id() -> u64 {
    let link = std::fs::read_link("/proc/thread-self").unwrap();
    link.file_name().unwrap().to_str().unwrap().parse().unwrap()
}

fn collect() -> Arc<Mutex<Vec<CacheEvent>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    jitbridge::set_event_callback(move |e| sink.lock().unwrap().push(e.clone())).unwrap();
    seen
}

#[test]
fn a_build_is_seen_with_its_tag_and_memory_hits_are_not() {
    let _serial = common::serial();
    let cpu = Device::cpu().unwrap();
    let kernel = fresh_kernel("events_rust_build", salt());
    jitbridge::set_thread_tag("request 1234").unwrap();
    let seen = collect();
    kernel.prepare(cpu).unwrap();
    let events = std::mem::take(&mut *seen.lock().unwrap());
    let kinds: Vec<CacheEventKind> = events.iter().map(|e| e.kind).collect();
    let disk = jitbridge::disk_cache::state().starts_with("on");
    let mut want = vec![CacheEventKind::BuildStart, CacheEventKind::BuildEnd];
    if disk {
        want.push(CacheEventKind::DiskStore);
    }
    assert_eq!(kinds, want);
    for e in &events {
        assert_eq!(e.name, kernel.module_name());
        assert_eq!(e.key, format!("{}:{}", cpu.index(), kernel.module_name()));
        assert_eq!(e.device, Some(cpu));
        assert_eq!(e.thread_id, this_thread_id());
        assert_eq!(e.tag, "request 1234");
        assert_eq!(e.status, None);
        assert_eq!(e.content_key.len(), if disk { 32 } else { 0 }, "{e:?}");
    }
    assert!(events[1].duration.is_some_and(|d| !d.is_zero()), "{:?}", events[1]);
    assert_eq!(events[0].kind.name(), "build start");

    for _ in 0..100 {
        kernel.prepare(cpu).unwrap();
    }
    assert!(seen.lock().unwrap().is_empty(), "memory hits raised events");
    jitbridge::clear_event_callback().unwrap();
    jitbridge::set_thread_tag("").unwrap();
    assert_eq!(jitbridge::thread_tag(), "");
}

/// On a GPU (none here: skipped; the H200 runs it), a build's events name the GPU, and a
/// process sealed to refuse gets `Sealed` for a new kernel while a built one still launches.
#[test]
fn a_gpu_build_is_seen_and_sealed_too() {
    let _serial = common::serial();
    let Ok(gpu) = Device::gpu(0) else {
        eprintln!("skipped: no GPU");
        return;
    };
    let built = fresh_kernel("events_rust_gpu", salt() + 4.0);
    let refused = fresh_kernel("events_rust_gpu_sealed", salt() + 5.0);
    let seen = collect();
    built.prepare(gpu).unwrap();
    jitbridge::seal(jitbridge::SealMode::Error).unwrap();
    let err = refused.prepare(gpu).unwrap_err();
    built.prepare(gpu).expect("a built kernel launches sealed");
    jitbridge::seal(jitbridge::SealMode::Off).unwrap();
    jitbridge::clear_event_callback().unwrap();
    assert_eq!(err.code(), ErrorCode::Sealed, "{err}");
    let events = seen.lock().unwrap();
    let kinds: Vec<CacheEventKind> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds[..2], [CacheEventKind::BuildStart, CacheEventKind::BuildEnd], "{kinds:?}");
    assert_eq!(kinds.last(), Some(&CacheEventKind::SealViolation), "{kinds:?}");
    assert!(events.iter().all(|e| e.device == Some(gpu)), "{events:?}");
    eprintln!("gpu build: {:?}", events[1].duration);
}

#[test]
fn a_failed_build_carries_its_code_and_log() {
    let _serial = common::serial();
    let seen = collect();
    let broken = common::vouched_kernel(&KernelSpec {
        name: "events_rust_broken",
        inputs: &[("inp", DType::F32)],
        outputs: &[("out", DType::F32)],
        body: &format!("out[thread_index()] = {} +;", salt()),
        ..Default::default()
    })
    .unwrap();
    let err = broken.prepare(Device::cpu().unwrap()).unwrap_err();
    jitbridge::clear_event_callback().unwrap();
    let events = seen.lock().unwrap();
    let fail = events.iter().find(|e| e.kind == CacheEventKind::BuildFail).expect("build fail");
    assert_eq!(fail.status, Some(ErrorCode::Compile));
    assert_eq!(fail.message, err.message());
}

#[test]
fn a_panicking_closure_loses_its_event_only() {
    let _serial = common::serial();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    jitbridge::set_event_callback(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        panic!("a dashboard that fails");
    })
    .unwrap();
    let kernel = fresh_kernel("events_rust_panic", salt() + 1.0);
    kernel.prepare(Device::cpu().unwrap()).expect("the build that raised events still works");
    assert!(calls.load(Ordering::SeqCst) >= 2, "each event reached the closure");
    jitbridge::clear_event_callback().unwrap();
}

#[test]
fn the_closure_may_launch_but_not_replace_itself_and_is_dropped_once_replaced() {
    let _serial = common::serial();
    let cpu = Device::cpu().unwrap();
    let inner = Arc::new(fresh_kernel("events_rust_inner", salt() + 2.0));
    let outer = fresh_kernel("events_rust_outer", salt() + 3.0);
    let results = Arc::new(Mutex::new(Vec::new()));
    let (kernel, sink) = (inner.clone(), results.clone());
    let token = Arc::new(());
    let held = token.clone();
    jitbridge::set_event_callback(move |e| {
        let _keep = &held;
        if e.kind == CacheEventKind::BuildEnd {
            let launched = kernel.prepare(cpu).map_err(|e| e.to_string());
            let replaced = jitbridge::clear_event_callback().map_err(|e| e.code());
            sink.lock().unwrap().push((e.name.clone(), launched, replaced));
        }
    })
    .unwrap();
    outer.prepare(cpu).unwrap();
    let results = std::mem::take(&mut *results.lock().unwrap());
    assert_eq!(results.len(), 1, "the inner build's events do not reach the closure: {results:?}");
    assert_eq!(results[0].0, outer.module_name());
    assert_eq!(results[0].1, Ok(()), "the closure's own launch");
    assert_eq!(results[0].2, Err(ErrorCode::InvalidArgument), "replacing from inside");
    assert_eq!(Arc::strong_count(&token), 2, "installed closure alive");
    jitbridge::clear_event_callback().unwrap();
    assert_eq!(Arc::strong_count(&token), 1, "the replaced closure was dropped");
}

#[test]
fn thread_tags_are_per_thread_and_checked() {
    jitbridge::set_thread_tag("main").unwrap();
    std::thread::spawn(|| {
        assert_eq!(jitbridge::thread_tag(), "", "a new thread has no tag");
        jitbridge::set_thread_tag("worker").unwrap();
    })
    .join()
    .unwrap();
    assert_eq!(jitbridge::thread_tag(), "main");
    let long = "x".repeat(jitbridge::THREAD_TAG_MAX + 1);
    assert_eq!(jitbridge::set_thread_tag(&long).unwrap_err().code(), ErrorCode::InvalidArgument);
    assert_eq!(jitbridge::set_thread_tag("a\0b").unwrap_err().code(), ErrorCode::InvalidArgument);
    assert_eq!(jitbridge::thread_tag(), "main", "a refused tag changes nothing");
    jitbridge::set_thread_tag(&long[1..]).unwrap();
    assert_eq!(jitbridge::thread_tag().len(), jitbridge::THREAD_TAG_MAX);
    jitbridge::set_thread_tag("").unwrap();
}
