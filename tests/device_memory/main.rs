//! Device memory is given back: the caching allocator's bounded waste, idle cap, trim, retry on
//! failure and statistics. Each test reads the statistics of the device it acts on
//! (`Device::memory_stats`), not the process totals, which other devices move too. On the cpu device, whose memory is the process's address space, a
//! test that needs a memory limit re-runs itself as a child under RLIMIT_AS.
#![cfg(target_os = "linux")]

#[path = "../common/mod.rs"]
mod common;

mod waste;

use jitbridge::streams;
use jitbridge::{
    Array, Counters, CustomKernel, DType, Device, KernelSpec, LaunchShape, MemoryStats, Stream,
};
use std::process::Command;

const MIB: u64 = 1 << 20;

/// A kernel whose one output is as large as asked while only thread 0 writes: device memory of
/// any size without host data of that size (which would count against the limit too).
fn sized_output_kernel() -> CustomKernel {
    common::vouched_kernel(&KernelSpec {
        name: "device_memory_sized_output",
        inputs: &[("x", DType::F32)],
        outputs: &[("y", DType::F32)],
        body: "if (thread_index() == 0) y[0] = x[0] + 1.0f;",
        ..Default::default()
    })
    .unwrap()
}

/// An output of `bytes` (a multiple of 4) on the calling thread's default stream.
fn output_of(kernel: &CustomKernel, x: &Array, bytes: u64) -> Result<Array, jitbridge::Error> {
    let shape = [(bytes / 4) as usize];
    // SAFETY: one thread writes y[0] from x[0]; both have at least one element.
    let mut out = unsafe { kernel.launch_unchecked(&[x], &[&shape], LaunchShape::Threads(1))? };
    Ok(out.remove(0))
}

/// This process's address space in bytes (VmSize).
fn address_space() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmSize:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[repr(C)]
struct Rlimit {
    current: u64,
    max: u64,
}

unsafe extern "C" {
    fn setrlimit(resource: i32, limit: *const Rlimit) -> i32;
}

/// Limits this process's address space to what it has now plus `extra` bytes.
fn limit_address_space(extra: u64) {
    const RLIMIT_AS: i32 = 9;
    let limit = address_space() + extra;
    // SAFETY: a valid rlimit; lowering a limit is always allowed.
    let rc = unsafe { setrlimit(RLIMIT_AS, &Rlimit { current: limit, max: limit }) };
    assert_eq!(rc, 0, "setrlimit(RLIMIT_AS) failed");
}

/// A kernel and its input, made and compiled on `stream` (installed as this thread's default
/// before): nothing of it is left on a stream of the thread's own, whose holds would only be let
/// go at the thread's exit, in the middle of a later test's measurement.
struct Warm {
    kernel: CustomKernel,
    x: Array,
}

fn warm_up(device: Device, stream: &Stream) -> Warm {
    let kernel = sized_output_kernel();
    let x = Array::from_slice(device, &[1.0f32], &[1]).unwrap();
    output_of(&kernel, &x, 4096).unwrap().eval().unwrap();
    stream.synchronize().unwrap();
    Warm { kernel, x }
}

/// The case: a 600 MiB output, freed, then a 400 MiB request under a limit that holds
/// one of them but not both. Power-of-two classes kept 1 GiB idle and failed the 400 MiB.
#[test]
fn a_freed_600_mib_output_makes_room_for_400_mib_under_a_limit() {
    if common::run_in_child("a_freed_600_mib_output_makes_room_for_400_mib_under_a_limit", &[])
        .is_some()
    {
        return;
    }
    let cpu = Device::cpu().unwrap();
    let stream = streams::new_thread_local_generation_stream(cpu).unwrap();
    let _guard = streams::install_thread_local_default_stream(&stream).unwrap();
    let warm = warm_up(cpu, &stream);
    limit_address_space(1100 * MIB);
    let big = output_of(&warm.kernel, &warm.x, 600 * MIB).expect("600 MiB fits the limit");
    big.eval().unwrap();
    drop(big);
    stream.synchronize().unwrap(); // the launch's hold on the buffer ends
    let after = output_of(&warm.kernel, &warm.x, 400 * MIB)
        .expect("400 MiB after the 600 MiB output was freed");
    after.eval().unwrap();
}

/// A server reads its output back and drops it without synchronizing the stream: the launch's
/// finished hold must not keep the 600 MiB from the next request (the retry and trim let go of
/// fired holds first), nor from a trim.
#[test]
fn a_read_and_dropped_output_is_given_back_without_a_stream_synchronize() {
    let name = "a_read_and_dropped_output_is_given_back_without_a_stream_synchronize";
    if common::run_in_child(name, &[]).is_some() {
        return;
    }
    let cpu = Device::cpu().unwrap();
    let stream = streams::new_thread_local_generation_stream(cpu).unwrap();
    let _guard = streams::install_thread_local_default_stream(&stream).unwrap();
    let warm = warm_up(cpu, &stream);
    let big = output_of(&warm.kernel, &warm.x, 64 * MIB).unwrap();
    big.eval().unwrap();
    drop(big);
    let freed = cpu.trim().unwrap();
    assert!(freed >= 64 * MIB, "trim freed {freed} bytes: a finished launch still held 64 MiB");
    limit_address_space(1100 * MIB);
    let big = output_of(&warm.kernel, &warm.x, 600 * MIB).expect("600 MiB fits the limit");
    big.eval().unwrap();
    drop(big);
    let after = output_of(&warm.kernel, &warm.x, 400 * MIB)
        .expect("400 MiB after the 600 MiB output was read and freed, no synchronize");
    after.eval().unwrap();
}

/// Under a limit that the 5/4 bound does not foresee, a refused allocation frees the idle
/// buffers and succeeds on its one retry, and the retry is counted.
#[test]
fn a_refused_allocation_frees_the_idle_buffers_and_retries_once() {
    if common::run_in_child("a_refused_allocation_frees_the_idle_buffers_and_retries_once", &[])
        .is_some()
    {
        return;
    }
    let cpu = Device::cpu().unwrap();
    let stream = streams::new_thread_local_generation_stream(cpu).unwrap();
    let _guard = streams::install_thread_local_default_stream(&stream).unwrap();
    let warm = warm_up(cpu, &stream);
    cpu.set_idle_cap(u64::MAX).unwrap();
    cpu.trim().unwrap();
    limit_address_space(900 * MIB);
    let before = cpu.memory_stats();
    let kept = output_of(&warm.kernel, &warm.x, 400 * MIB).unwrap();
    let idle = output_of(&warm.kernel, &warm.x, 400 * MIB).unwrap();
    idle.eval().unwrap();
    drop(idle);
    stream.synchronize().unwrap();
    assert_eq!(cpu.memory_stats().idle_bytes, 400 * MIB, "the second buffer is idle");
    // 800 MiB live at the peak allows 1000 MiB reserved: the idle buffer stays until the
    // driver refuses 152 MiB more.
    let third = output_of(&warm.kernel, &warm.x, 150 * MIB).expect("150 MiB after the retry");
    third.eval().unwrap();
    let c = cpu.memory_stats().since(&before);
    assert_eq!(c.retries, 1, "{c:?}");
    assert_eq!(c.idle_bytes, 0, "{c:?}");
    assert_eq!(c.allocations, 3, "{c:?}");
    assert_eq!(c.frees, 1, "{c:?}");
    drop(kept);
}

/// A small deterministic generator (xorshift64*), so that a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[(self.next() % from.len() as u64) as usize]
    }

    /// An activation's bytes: batch x sequence x a hidden size of f32, as a server sees them.
    fn activation(&mut self) -> u64 {
        let batch = self.pick(&[1, 2, 3, 4, 6, 8]);
        let sequence = self.pick(&[1, 7, 64, 100, 333, 512, 1000, 2048]);
        let hidden = self.pick(&[256, 1024, 1536]);
        batch * sequence * hidden * 4
    }
}

/// A server's day in small: batch and sequence sizes vary, arrays come and go. Reserved memory
/// stays within 5/4 of the most ever live, the cache still serves requests, and the counters
/// add up: live bytes are what the arrays hold, every request is a reuse or an allocation, and
/// after a trim every allocation has been freed.
fn varying_sizes_keep_reserved_within_five_quarters_of_peak_live(device: Device) {
    let _turn = common::serial();
    let stream = streams::new_thread_local_generation_stream(device).unwrap();
    let _guard = streams::install_thread_local_default_stream(&stream).unwrap();
    let warm = warm_up(device, &stream);
    let old_cap = device.idle_cap();
    device.set_idle_cap(u64::MAX).unwrap(); // the 5/4 bound alone, not the cap, must hold it
    device.trim().unwrap(); // no buffer from before the reset is freed during the test
    Counters::reset(); // and the peak starts from the live bytes now
    let base = device.memory_stats().live_bytes;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut live: Vec<(Array, u64)> = Vec::new();
    let (mut peak, mut requests, mut worst) = (base, 0u64, 0f64);
    for step in 0..600 {
        if live.is_empty() || (live.len() < 8 && rng.next() % 3 != 0) {
            let bytes = if step == 0 { 96 * MIB } else { rng.activation() };
            live.push((output_of(&warm.kernel, &warm.x, bytes).unwrap(), bytes));
            requests += 1;
        } else {
            let i = (rng.next() % live.len() as u64) as usize;
            live.swap_remove(i);
        }
        stream.synchronize().unwrap(); // launches let go of their buffers
        let now = base + live.iter().map(|(_, b)| b).sum::<u64>();
        peak = peak.max(now);
        let c = device.memory_stats();
        assert_eq!(c.live_bytes, now, "step {step}: live bytes are the arrays' bytes");
        assert_eq!(c.peak_live_bytes, peak, "step {step}");
        assert_eq!(c.reuses + c.allocations, requests, "step {step}: {c:?}");
        let in_use = c.reserved_bytes - c.idle_bytes;
        assert!(in_use >= now && in_use <= now + now / 8 + 512, "step {step}: {c:?}");
        let ratio = c.reserved_bytes as f64 / peak as f64;
        worst = worst.max(ratio);
        assert!(ratio <= 1.25, "step {step}: reserved {ratio:.3}x of peak live: {c:?}");
    }
    live.clear();
    stream.synchronize().unwrap();
    let c = device.memory_stats();
    assert!(c.reuses > requests / 4, "the cache served too few requests: {c:?}");
    let freed = device.trim().unwrap();
    assert_eq!(freed, c.idle_bytes, "trim frees exactly the idle bytes");
    let after = device.memory_stats();
    assert_eq!(after.idle_bytes, 0);
    assert_eq!(after.reserved_bytes, c.reserved_bytes - freed);
    assert_eq!(after.frees, after.allocations, "every allocation was freed: {after:?}");
    println!("{device:?}: worst reserved/peak live {worst:.3}, {requests} requests, {after:?}");
    device.set_idle_cap(old_cap).unwrap();
}

/// Trim gives idle memory back to the driver: on the cpu, the process's address space shrinks.
#[test]
fn trim_gives_idle_memory_back() {
    let _turn = common::serial();
    let cpu = Device::cpu().unwrap();
    let stream = streams::new_thread_local_generation_stream(cpu).unwrap();
    let _guard = streams::install_thread_local_default_stream(&stream).unwrap();
    let warm = warm_up(cpu, &stream);
    let old_cap = cpu.idle_cap();
    cpu.set_idle_cap(1 << 30).unwrap();
    let arrays: Vec<Array> =
        (0..3).map(|_| output_of(&warm.kernel, &warm.x, 64 * MIB).unwrap()).collect();
    drop(arrays);
    stream.synchronize().unwrap();
    let idle = cpu.memory_stats().idle_bytes;
    assert!(idle >= 192 * MIB, "three 64 MiB buffers went idle: {idle}");
    let space = address_space();
    assert_eq!(cpu.trim().unwrap(), idle);
    assert_eq!(cpu.memory_stats().idle_bytes, 0);
    let shrunk = space.saturating_sub(address_space());
    assert!(shrunk >= 180 * MIB, "the address space shrank by {} MiB only", shrunk / MIB);
    assert_eq!(cpu.trim().unwrap(), 0, "nothing left to trim");
    cpu.set_idle_cap(old_cap).unwrap();
}

/// Idle bytes never exceed the cap: the oldest idle buffers are freed first, lowering the cap
/// frees at once, and a cap of 0 keeps nothing.
fn the_idle_cap_is_honoured(device: Device) {
    let _turn = common::serial();
    let stream = streams::new_thread_local_generation_stream(device).unwrap();
    let _guard = streams::install_thread_local_default_stream(&stream).unwrap();
    let warm = warm_up(device, &stream);
    let old_cap = device.idle_cap();
    device.set_idle_cap(100 * MIB).unwrap();
    device.trim().unwrap();
    let before = device.memory_stats();
    let arrays: Vec<Array> =
        (0..3).map(|_| output_of(&warm.kernel, &warm.x, 48 * MIB).unwrap()).collect();
    drop(arrays);
    stream.synchronize().unwrap();
    let c = device.memory_stats().since(&before);
    assert_eq!((c.idle_bytes, c.frees), (96 * MIB, 1), "two fit under 100 MiB: {c:?}");
    device.set_idle_cap(40 * MIB).unwrap();
    let c = device.memory_stats().since(&before);
    assert_eq!((c.idle_bytes, c.frees), (0, 3), "a 48 MiB buffer exceeds 40: {c:?}");
    device.set_idle_cap(0).unwrap();
    drop(output_of(&warm.kernel, &warm.x, MIB).unwrap());
    stream.synchronize().unwrap();
    let c = device.memory_stats().since(&before);
    assert_eq!((c.idle_bytes, c.frees), (0, 4), "a cap of 0 keeps nothing: {c:?}");
    device.set_idle_cap(old_cap).unwrap();
    assert_eq!(device.idle_cap(), old_cap);
}

/// JITBRIDGE_IDLE_CAP sets every device's cap at start, parsed strictly: anything but a byte
/// count keeps the default, with a warning naming the value.
#[test]
fn the_idle_cap_comes_from_the_environment() {
    const NAME: &str = "the_idle_cap_comes_from_the_environment";
    const EXPECT: &str = "JITBRIDGE_TEST_EXPECTED_IDLE_CAP";
    let Ok(value) = std::env::var(common::CHILD) else {
        let default = Device::cpu().unwrap().total_memory() / 16;
        let default = default.to_string();
        for (text, expected) in [
            ("0", "0"),
            ("123456", "123456"),
            ("64M", "67108864"),
            ("64MiB", "67108864"),
            ("2G", "2147483648"),
            ("1T", "1099511627776"),
        ] {
            let out =
                common::run_in_child(NAME, &[("JITBRIDGE_IDLE_CAP", text), (EXPECT, expected)]);
            assert!(!out.unwrap().contains("JITBRIDGE_IDLE_CAP"), "{text}: no warning");
        }
        for bad in ["", "1.5G", "64 M", "-1", "64m", "64MB", "0x10", "99999999999999999999", "16E"]
        {
            let out =
                common::run_in_child(NAME, &[("JITBRIDGE_IDLE_CAP", bad), (EXPECT, &default)]);
            assert!(
                out.unwrap().contains(&format!("JITBRIDGE_IDLE_CAP=\"{bad}\"")),
                "{bad:?} is refused with a warning"
            );
        }
        return;
    };
    assert_eq!(value, NAME);
    let expected: u64 = std::env::var(EXPECT).unwrap().parse().unwrap();
    assert_eq!(Device::cpu().unwrap().idle_cap(), expected);
}

/// Buffers made on several threads' streams and freed on another thread: the counters still add
/// up once everything is let go (every live byte returned, reserved = in use + idle).
fn buffers_freed_on_other_threads_keep_the_books_straight(device: Device) {
    let _turn = common::serial();
    let stream = streams::new_thread_local_generation_stream(device).unwrap();
    let _guard = streams::install_thread_local_default_stream(&stream).unwrap();
    let Warm { kernel, x } = warm_up(device, &stream);
    let base = device.memory_stats();
    let (send, receive) = std::sync::mpsc::channel::<Array>();
    std::thread::scope(|s| {
        s.spawn(move || receive.into_iter().for_each(drop)); // frees, on its own thread
        for t in 0..4u64 {
            let (send, kernel, x) = (send.clone(), &kernel, &x);
            s.spawn(move || {
                let stream = streams::new_thread_local_generation_stream(device).unwrap();
                let _guard = streams::install_thread_local_default_stream(&stream).unwrap();
                let mut rng = Rng(t + 1);
                for _ in 0..200 {
                    send.send(output_of(kernel, x, rng.activation() / 16 + 4).unwrap()).unwrap();
                }
                stream.synchronize().unwrap();
            });
        }
        drop(send);
    });
    let c = device.memory_stats();
    assert_eq!(c.live_bytes, base.live_bytes, "every buffer was let go: {c:?}");
    assert_eq!(c.reserved_bytes - c.idle_bytes, base.reserved_bytes - base.idle_bytes);
    let d = c.since(&base);
    assert_eq!(d.allocations + d.reuses, 800, "{d:?}");
}

/// `jitbridge info` shows each device's idle cap (`JITBRIDGE_IDLE_CAP`); not the memory
/// statistics, which a new process has at 0.
#[test]
fn info_shows_each_devices_idle_cap() {
    let out = Command::new(env!("CARGO_BIN_EXE_jitbridge"))
        .arg("info")
        .env("JITBRIDGE_IDLE_CAP", "48M")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for device in Device::all().unwrap() {
        let line = text
            .lines()
            .find(|l| l.starts_with("device ") && l.contains(&format!(" {} ", device.spec())))
            .unwrap_or_else(|| panic!("no line for {device:?}:\n{text}"));
        assert!(line.ends_with(", idle cap 48.0 MiB"), "{line}");
    }
}

/// Each device's statistics, summed field by field: the process totals of `Counters`.
fn summed(devices: &[Device]) -> MemoryStats {
    devices.iter().map(|d| d.memory_stats()).fold(MemoryStats::default(), |a, s| MemoryStats {
        live_bytes: a.live_bytes + s.live_bytes,
        peak_live_bytes: a.peak_live_bytes + s.peak_live_bytes,
        reserved_bytes: a.reserved_bytes + s.reserved_bytes,
        idle_bytes: a.idle_bytes + s.idle_bytes,
        allocations: a.allocations + s.allocations,
        frees: a.frees + s.frees,
        reuses: a.reuses + s.reuses,
        retries: a.retries + s.retries,
    })
}

fn totals_of(c: &Counters) -> MemoryStats {
    MemoryStats {
        live_bytes: c.mem_live_bytes,
        peak_live_bytes: c.mem_peak_live_bytes,
        reserved_bytes: c.mem_reserved_bytes,
        idle_bytes: c.mem_idle_bytes,
        allocations: c.mem_allocations,
        frees: c.mem_frees,
        reuses: c.mem_reuses,
        retries: c.mem_retries,
    }
}

/// A buffer made and freed on one device moves that device's statistics and no other's; the
/// devices' statistics add up to the process totals before, while and after. With the cpu alone
/// (no GPU build or no GPU) there is no other device: the totals are the cpu's.
#[test]
fn one_devices_statistics_do_not_move_with_another_devices_buffers() {
    let _turn = common::serial();
    let devices = Device::all().unwrap();
    assert_eq!(summed(&devices), totals_of(&Counters::read()));
    for &device in &devices {
        let stream = streams::new_thread_local_generation_stream(device).unwrap();
        let _guard = streams::install_thread_local_default_stream(&stream).unwrap();
        let old_cap = device.idle_cap();
        device.set_idle_cap(u64::MAX).unwrap(); // the freed buffer stays, as idle bytes
        let others: Vec<(Device, MemoryStats)> =
            devices.iter().filter(|d| **d != device).map(|d| (*d, d.memory_stats())).collect();
        let before = device.memory_stats();
        let data = vec![1.0f32; (4 * MIB / 4) as usize];
        let array = Array::from_slice(device, &data, &[data.len()]).unwrap();
        array.eval().unwrap();
        let held = device.memory_stats();
        assert!(held.live_bytes >= before.live_bytes + 4 * MIB, "{device:?}: {held:?}");
        assert_eq!(summed(&devices), totals_of(&Counters::read()), "{device:?} holds 4 MiB");
        drop(array);
        stream.synchronize().unwrap(); // the upload lets go of the buffer: idle
        let idle = device.memory_stats().idle_bytes;
        assert!(idle >= 4 * MIB, "{device:?}: the freed buffer is idle: {idle}");
        assert_eq!(device.trim().unwrap(), idle, "{device:?}: trim frees its idle bytes");
        let after = device.memory_stats();
        assert!(after.frees > before.frees, "{device:?}: the buffer was freed: {after:?}");
        for (other, stats) in &others {
            assert_eq!(other.memory_stats(), *stats, "{other:?} moved with {device:?}'s buffer");
        }
        device.set_idle_cap(old_cap).unwrap();
    }
    assert_eq!(summed(&devices), totals_of(&Counters::read()));
}

/// Statistics read while other threads allocate and free on the device are each one instant's:
/// reserved covers idle plus what is in use, which covers the live bytes, and the peak covers
/// the live bytes.
#[test]
fn a_devices_statistics_are_consistent_under_concurrency() {
    let _turn = common::serial();
    let cpu = Device::cpu().unwrap();
    let Warm { kernel, x } = {
        let stream = streams::new_thread_local_generation_stream(cpu).unwrap();
        let _guard = streams::install_thread_local_default_stream(&stream).unwrap();
        warm_up(cpu, &stream)
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    let mut reads = 0u64;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..3u64)
            .map(|t| {
                let (kernel, x) = (&kernel, &x);
                s.spawn(move || {
                    let stream = streams::new_thread_local_generation_stream(cpu).unwrap();
                    let _guard = streams::install_thread_local_default_stream(&stream).unwrap();
                    let mut rng = Rng(t + 11);
                    for _ in 0..300 {
                        drop(output_of(kernel, x, rng.activation() / 16 + 4).unwrap());
                        stream.synchronize().unwrap();
                    }
                })
            })
            .collect();
        let reader = s.spawn(|| {
            let mut n = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let c = cpu.memory_stats();
                assert!(c.idle_bytes <= c.reserved_bytes, "{c:?}");
                assert!(c.live_bytes <= c.reserved_bytes - c.idle_bytes, "{c:?}");
                assert!(c.live_bytes <= c.peak_live_bytes, "{c:?}");
                n += 1;
            }
            n
        });
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        reads = reader.join().unwrap();
    });
    assert!(reads > 0, "the reader never read");
    assert_eq!(summed(&Device::all().unwrap()), totals_of(&Counters::read()));
}

/// The tests that run on any device, on the cpu and, in a GPU build, on GPU 0.
macro_rules! device_tests {
    ($module:ident, $device:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn varying_sizes_keep_reserved_within_five_quarters_of_peak_live() {
                super::varying_sizes_keep_reserved_within_five_quarters_of_peak_live($device);
            }

            #[test]
            fn the_idle_cap_is_honoured() {
                super::the_idle_cap_is_honoured($device);
            }

            #[test]
            fn buffers_freed_on_other_threads_keep_the_books_straight() {
                super::buffers_freed_on_other_threads_keep_the_books_straight($device);
            }
        }
    };
}

device_tests!(cpu, Device::cpu().unwrap());
#[cfg(any(feature = "cuda", feature = "rocm"))]
device_tests!(gpu, Device::gpu(0).unwrap());

/// A GPU filled with live buffers: the allocation past its memory fails with the vendor's
/// out-of-memory as JB_ERR_OUT_OF_MEMORY; then with half of them idle, a larger request that
/// the 5/4 bound lets through is refused by the driver, frees the idle buffers and succeeds on
/// its retry.
#[cfg(any(feature = "cuda", feature = "rocm"))]
#[test]
fn gpu_a_full_device_frees_idle_buffers_and_retries() {
    let _turn = common::serial();
    let gpu = Device::gpu(0).unwrap();
    let stream = streams::new_thread_local_generation_stream(gpu).unwrap();
    let _guard = streams::install_thread_local_default_stream(&stream).unwrap();
    let warm = warm_up(gpu, &stream);
    let old_cap = gpu.idle_cap();
    gpu.set_idle_cap(u64::MAX).unwrap();
    gpu.trim().unwrap();
    Counters::reset();
    let chunk = 1u64 << 30;
    let mut live = Vec::new();
    let refused = loop {
        match output_of(&warm.kernel, &warm.x, chunk) {
            Ok(a) => live.push(a),
            Err(e) => break e,
        }
        assert!(live.len() < 4096, "no end to the device's memory");
    };
    assert_eq!(refused.code(), jitbridge::ErrorCode::OutOfMemory, "{refused}");
    assert!(live.len() >= 8, "a GPU of {} GiB", live.len());
    let kept = live.split_off(live.len() / 2);
    drop(live);
    stream.synchronize().unwrap();
    let before = gpu.memory_stats();
    assert!(before.idle_bytes >= 4 * chunk, "{before:?}");
    let larger = output_of(&warm.kernel, &warm.x, chunk + chunk / 2).expect("after the retry");
    larger.eval().unwrap();
    let c = gpu.memory_stats().since(&before);
    assert_eq!((c.retries, c.idle_bytes), (1, 0), "{c:?}");
    drop((kept, larger));
    stream.synchronize().unwrap();
    gpu.trim().unwrap();
    gpu.set_idle_cap(old_cap).unwrap();
}
