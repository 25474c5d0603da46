//! A leaked default-stream guard (`mem::forget`) must leak a reference, never leave this thread
//! with a freed default stream: the stream is dropped on another thread and this one keeps
//! launching. CI also runs this file under valgrind memcheck (`.ci/run`), where a dangling
//! default is an invalid read even when it happens not to crash.

use jitbridge::{Array, DType, Device, jit_race_probe_array, streams};

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
    let device = Device::cpu().unwrap();
    let stream = streams::new_thread_local_generation_stream(device).unwrap();
    let guard = streams::install_thread_local_default_stream(&stream).unwrap();
    std::mem::forget(guard); // safe code: the borrow of `stream` ends here
    std::thread::spawn(move || drop(stream)).join().unwrap();
    for round in 0..20 {
        launch_and_check(device, round);
    }
}

#[test]
fn forgotten_guard_on_a_thread_that_exits() {
    let device = Device::cpu().unwrap();
    let stream = streams::new_thread_local_generation_stream(device).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::mem::forget(streams::install_thread_local_default_stream(&stream).unwrap());
            launch_and_check(device, 0);
        });
    });
    drop(stream); // the exited thread's installation let go of its reference already
    launch_and_check(device, 1);
}
