//! A leaked default-stream guard (`mem::forget`) must leak a reference, never leave this thread
//! with a freed default stream: the stream is dropped on another thread and this one keeps
//! launching. Each test first checks, deterministically, that the stream is still alive: its
//! cpu worker thread still runs (a use of a freed stream may hang, crash or seem to work). CI
//! also runs this file under valgrind memcheck (`.ci/run`), where a dangling default is an
//! invalid read even when it happens not to crash.

mod common;

use jitbridge::{Array, DType, Device, Stream, jit_race_probe_array, streams};
use std::collections::HashSet;
use std::io::Write;
use std::time::{Duration, Instant};

/// jitbridge.h's JB_CPU_STREAM_THREAD_NAME: the name of a cpu stream's worker thread.
const WORKER_NAME: &str = "jb cpu stream";

/// The thread ids of this process's cpu stream workers.
fn cpu_stream_workers() -> HashSet<u32> {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    tasks
        .filter_map(|task| {
            let path = task.ok()?.path();
            let comm = std::fs::read_to_string(path.join("comm")).ok()?;
            (comm.trim_end() == WORKER_NAME).then(|| path.file_name()?.to_str()?.parse().ok())?
        })
        .collect()
}

/// A new stream on the cpu and the thread id of its worker.
fn stream_and_worker(device: Device) -> (Stream, u32) {
    let before = cpu_stream_workers();
    let stream = streams::new_thread_local_generation_stream(device).unwrap();
    let new: Vec<u32> = cpu_stream_workers().difference(&before).copied().collect();
    assert_eq!(new.len(), 1, "one new cpu stream worker, not {new:?}");
    (stream, new[0])
}

/// Says why and ends the process: a thread's installation then points at a freed stream, and
/// that thread's exit would crash before the test harness printed its captured report.
fn fail_at_once(message: String) -> ! {
    // io::stderr directly: the harness captures eprintln!, not this.
    let _ = writeln!(std::io::stderr(), "stream_guard: {message}");
    std::process::exit(1);
}

/// Fails the test unless the worker `tid` is alive and waiting for work (state S): a stream
/// destroyed too early has joined its worker, whose task is then gone or exiting.
fn assert_worker_alive(tid: u32, after_what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"));
        // The state is the first field after the parenthesised name.
        let state = stat.as_ref().ok().and_then(|s| s.rsplit_once(") ")).map(|(_, r)| &r[..1]);
        match state {
            Some("S") => return,
            None => fail_at_once(format!(
                "after {after_what}, the stream's worker thread has ended: the stream was \
                 destroyed while still in use (the installation took no reference of its own)"
            )),
            Some(other) if Instant::now() > deadline => fail_at_once(format!(
                "after {after_what}, the stream's worker thread is in state {other}, not waiting \
                 for work, after 10 s"
            )),
            Some(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

fn launch_and_check(device: Device, round: usize) {
    let n = 256;
    let input = Array::arange(device, n, DType::F32).unwrap();
    let out = jit_race_probe_array(&input, 9_100).unwrap();
    let values = out.to_vec::<f32>().unwrap();
    for (i, v) in values.iter().enumerate() {
        assert_eq!(*v, 2.0 * i as f32 + 1.0, "round {round}, element {i}");
    }
}

#[test]
fn forgotten_guard_then_stream_dropped_on_another_thread() {
    let _turn = common::serial(); // no other test's stream workers start or end meanwhile
    let device = Device::cpu().unwrap();
    let (stream, worker) = stream_and_worker(device);
    let guard = streams::install_thread_local_default_stream(&stream).unwrap();
    std::mem::forget(guard); // safe code: the borrow of `stream` ends here
    std::thread::spawn(move || drop(stream)).join().unwrap();
    assert_worker_alive(worker, "its owner dropped it on another thread");
    for round in 0..20 {
        launch_and_check(device, round);
    }
}

#[test]
fn forgotten_guard_on_a_thread_that_exits() {
    let _turn = common::serial();
    let device = Device::cpu().unwrap();
    let (stream, worker) = stream_and_worker(device);
    std::thread::scope(|s| {
        // Joined, not only waited for: the thread's exit (its thread-local destructors, which
        // let go of its installation) has happened once join returns.
        let thread = s.spawn(|| {
            std::mem::forget(streams::install_thread_local_default_stream(&stream).unwrap());
            launch_and_check(device, 0);
        });
        thread.join().unwrap();
    });
    assert_worker_alive(worker, "the thread that installed it exited");
    drop(stream); // the exited thread's installation let go of its reference already
    launch_and_check(device, 1);
}

#[test]
fn thread_default_stream_handed_to_helpers_outlives_its_thread() {
    let _turn = common::serial(); // its stream's worker must not start while another test counts
    let device = Device::cpu().unwrap();
    // The thread's default stream, retained; the thread then exits (its own reference goes).
    let (stream, made) = std::thread::spawn(move || {
        let stream = jitbridge::Stream::thread_default(device).unwrap();
        let made = Array::arange(device, 256, DType::F32).unwrap(); // queued on that stream
        (stream, made)
    })
    .join()
    .unwrap();
    std::thread::scope(|s| {
        for helper in 0..3 {
            let (stream, made) = (&stream, &made);
            s.spawn(move || {
                let _guard = streams::install_thread_local_default_stream(stream).unwrap();
                for round in 0..10 {
                    let out = jit_race_probe_array(made, 9_100).unwrap();
                    let values = out.to_vec::<f32>().unwrap();
                    for (i, v) in values.iter().enumerate() {
                        assert_eq!(*v, 2.0 * i as f32 + 1.0, "helper {helper} round {round}");
                    }
                }
            });
        }
    });
    drop(made);
    drop(stream); // the last reference: waits for the stream's work, then destroys it
}
