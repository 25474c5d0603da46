//! Stream priorities: one scale on every device, clamped to the device's range, and what the
//! device or system reports. On the cpu a stream's priority is its worker thread's nice value,
//! read back from /proc; on a GPU (a cuda or rocm build on a machine with one), the driver's
//! stream priority.

use jitbridge::{Device, Stream};
use std::collections::BTreeSet;

/// The ids of this process's cpu stream workers (threads named as jitbridge.h says).
fn stream_workers() -> BTreeSet<u32> {
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let entry = entry.unwrap();
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == "jb cpu stream" {
            found.insert(entry.file_name().to_string_lossy().parse().unwrap());
        }
    }
    found
}

/// A thread's nice value: field 19 of its stat line (after the command's closing parenthesis).
fn nice_of(stat_path: &str) -> i32 {
    let stat = std::fs::read_to_string(stat_path).expect(stat_path);
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split_whitespace().nth(16).unwrap().parse().unwrap()
}

/// A new stream of `priority`, its reported priority, and its worker's nice value.
fn stream_and_nice(cpu: Device, priority: i32) -> (Stream, i32, i32) {
    let before = stream_workers();
    let stream = Stream::with_priority(cpu, priority).unwrap();
    let new: Vec<u32> = stream_workers().difference(&before).copied().collect();
    assert_eq!(new.len(), 1, "one new worker thread per cpu stream: {new:?}");
    let nice = nice_of(&format!("/proc/self/task/{}/stat", new[0]));
    let reported = stream.priority().unwrap();
    (stream, reported, nice)
}

/// One test only in this binary: the worker threads it looks for are its own.
#[test]
fn cpu_priorities_are_clamped_and_set_on_the_worker_thread() {
    let cpu = Device::cpu().unwrap();
    assert_eq!(cpu.max_stream_priority(), 4);
    let base = nice_of("/proc/thread-self/stat");
    let (_normal, normal, normal_nice) = stream_and_nice(cpu, 0);
    assert_eq!((normal, normal_nice), (0, base), "priority 0 leaves the worker as its creator");
    let (_below, below, below_nice) = stream_and_nice(cpu, -7);
    assert_eq!((below, below_nice), (0, base), "a negative priority is clamped to 0");
    let mut got = Vec::new();
    for asked in [1, 2, 99] {
        let (_stream, reported, nice) = stream_and_nice(cpu, asked);
        assert!(reported <= asked.min(4), "asked {asked}, reported {reported}");
        // The worker's nice is what the stream reports, whatever the system permitted.
        assert_eq!(nice, (base - 5 * reported).max(-20), "asked {asked}, reported {reported}");
        got.push(reported);
    }
    println!("cpu priorities asked 1, 2, 99: got {got:?} (nice {base} at 0)");
    // Where raising is permitted at all (root, CAP_SYS_NICE), each asked level is met, clamped.
    if got[0] > 0 {
        assert_eq!(got, [1, 2, 4], "more urgent asks are more urgent, 99 clamped to the most");
    }
}

#[cfg(any(feature = "cuda", feature = "rocm"))]
#[test]
fn gpu_priorities_are_the_drivers_and_ordered() {
    let Ok(gpu) = Device::lookup("gpu") else {
        println!("no GPU here: nothing to check");
        return;
    };
    let max = gpu.max_stream_priority();
    println!("{} ({}) offers stream priorities 0..={max}", gpu.name(), gpu.backend());
    assert!(max > 0, "a GPU with stream priorities offers more than one");
    let streams: Vec<Stream> =
        (0..=max + 2).map(|p| Stream::with_priority(gpu, p).unwrap()).collect();
    let reported: Vec<i32> = streams.iter().map(|s| s.priority().unwrap()).collect();
    let want: Vec<i32> = (0..=max + 2).map(|p| p.min(max)).collect();
    assert_eq!(reported, want, "each stream has the priority asked, clamped to the device's");
    assert_eq!(Stream::with_priority(gpu, -1).unwrap().priority().unwrap(), 0);
}
