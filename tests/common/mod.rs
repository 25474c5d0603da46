//! The mission's concurrency scenarios, written once; each backend's test file instantiates them
//! with `jit_module_concurrency_tests!`. Also what several test binaries share: running a command
//! to its end (`finish`), a JSON reader (`json`) and a pseudo-terminal (`pty`).
#![allow(dead_code)]

pub mod json;
pub mod pty;
mod temporary_cache;

use jitbridge::race::{self, Probe};
use jitbridge::{Counters, Device};
use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub const ROUNDS: i32 = 16;
pub const THREADS: i32 = 8;

/// Runs to the end, or fails the test if it has not ended within `limit`: a hang is a bug.
pub fn finish(mut command: Command, limit: Duration) -> Output {
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().expect("start jitbridge");
    let (mut stdout, mut stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stdout.read_to_end(&mut bytes).map(|_| bytes)
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stderr.read_to_end(&mut bytes).map(|_| bytes)
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} still running after {limit:?}: it hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: out.join().unwrap().unwrap(), stderr: err.join().unwrap().unwrap() }
}

/// Set in a child that `run_in_child` starts: names the test the child runs.
pub const CHILD: &str = "JITBRIDGE_TEST_CHILD";

/// In the parent: runs test `name` of this binary again in a child process with CHILD set (and
/// `env`), fails with the child's output unless it passes, and returns that output. A crash
/// (the child ended by a signal) or a hang (past 2 minutes) fails with a message that says so,
/// so a test whose body might crash the process still reports. In the child: None, so the
/// caller runs the body.
pub fn run_in_child(name: &str, env: &[(&str, &str)]) -> Option<String> {
    use std::os::unix::process::ExitStatusExt;
    if std::env::var(CHILD).as_deref() == Ok(name) {
        return None;
    }
    let _turn = serial(); // one child at a time: some measure the child's memory
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, name)
        .envs(env.iter().copied());
    let out = finish(command, Duration::from_secs(120));
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if let Some(signal) = out.status.signal() {
        let what = match signal {
            6 => " (SIGABRT)",
            7 => " (SIGBUS)",
            9 => " (SIGKILL)",
            11 => " (SIGSEGV)",
            _ => "",
        };
        panic!(
            "the child running {name} ({env:?}) crashed: killed by signal {signal}{what}:\n{text}"
        );
    }
    assert!(out.status.success(), "the child running {name} ({env:?}) failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran no test {name}:\n{text}");
    Some(text)
}

/// `CustomKernel::new` for the tests' own kernels, whose promise is made here once: every
/// kernel a test makes does nothing undefined, in every launch the tests make of it, apart from
/// subscripting its arrays out of range, which a test does only on purpose, with the bounds
/// checks on. (A body the library refuses is never compiled, so never runs.)
pub fn vouched_kernel(
    spec: &jitbridge::KernelSpec<'_>,
) -> Result<jitbridge::CustomKernel, jitbridge::Error> {
    // SAFETY: as above: the tests' bodies compute on their arrays' elements and subscript them.
    unsafe { jitbridge::CustomKernel::new(spec) }
}

/// A kernel named `name` of one f32 input `inp` and one f32 output `out`, running `body`.
pub fn f32_kernel(name: &str, body: &str) -> jitbridge::CustomKernel {
    vouched_kernel(&jitbridge::KernelSpec {
        name,
        inputs: &[("inp", jitbridge::DType::F32)],
        outputs: &[("out", jitbridge::DType::F32)],
        body,
        ..Default::default()
    })
    .unwrap()
}

/// `f32_kernel` with the body `out = inp * factor + salt`: each salt is a kernel of its own
/// (its own source, key and cache entry).
pub fn salted_kernel(name: &str, factor: u32, salt: u32) -> jitbridge::CustomKernel {
    let body = format!("out[thread_index()] = inp[thread_index()] * {factor}.0f + {salt}.0f;");
    f32_kernel(name, &body)
}

/// Scenarios read process-wide counters, so the tests of one binary take turns.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn assert_all_exact(outcomes: &[Result<bool, jitbridge::Error>], round: i32) {
    for (thread, outcome) in outcomes.iter().enumerate() {
        match outcome {
            Ok(true) => {}
            Ok(false) => panic!("round {round}, thread {thread}: output is not 2*i + 1"),
            Err(e) => panic!("round {round}, thread {thread}: {e}"),
        }
    }
}

/// 16 rounds; in each, 8 threads with their own streams first-launch the round's variant
/// together. Every output exact, and each round built its one new key exactly once.
pub fn same_kernel_first_launch_from_many_threads(device: Device, probe: Probe, base: i32) {
    let _turn = serial();
    for round in 0..ROUNDS {
        Counters::reset();
        let before = Counters::read();
        let variants = vec![base + round; THREADS as usize];
        let outcomes = race::first_launch_round(device, probe, &variants)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_all_exact(&outcomes, round);
        let delta = Counters::read().since(&before);
        assert_eq!(delta.builds, 1, "round {round}: one key was built {} times", delta.builds);
        assert_eq!(delta.build_failures, 0, "round {round}: a build failed");
        assert_eq!(delta.hits + delta.misses, THREADS as u64, "round {round}: one lookup each");
    }
}

/// 16 rounds; in each, one thread keeps launching an already-built variant while 8 threads
/// first-launch a new variant each. Every output exact; each new key built exactly once and
/// the warm key never rebuilt.
pub fn distinct_kernels_first_launch_while_others_hit_cache(
    device: Device,
    probe: Probe,
    base: i32,
) {
    let _turn = serial();
    let warm = base;
    let input =
        jitbridge::Array::arange(device, race::PROBE_ELEMENTS, jitbridge::DType::F32).unwrap();
    probe(&input, warm).unwrap().eval().unwrap();
    for round in 0..ROUNDS {
        Counters::reset();
        let before = Counters::read();
        let variants: Vec<i32> = (0..THREADS).map(|t| base + 1 + round * THREADS + t).collect();
        let (outcomes, hitter) = race::round_with_hitter(device, probe, &variants, Some(warm))
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_all_exact(&outcomes, round);
        let launches = match hitter.expect("the hitter ran") {
            Ok(n) => n,
            Err(e) => panic!("round {round}: warm hitter: {e}"),
        };
        let delta = Counters::read().since(&before);
        assert_eq!(
            delta.builds, THREADS as u64,
            "round {round}: {} builds for {THREADS} new keys",
            delta.builds
        );
        assert_eq!(delta.build_failures, 0, "round {round}: a build failed");
        assert!(delta.hits >= launches, "round {round}: every warm launch is a hit");
        // Compiles of different keys never overlap: the exclusive lock serialises them.
        assert_eq!(delta.peak_concurrent_builds, 1, "round {round}: builds ran in parallel");
    }
}

/// Instantiates both scenarios for one backend: a device expression and a probe.
#[macro_export]
macro_rules! jit_module_concurrency_tests {
    ($device:expr, $probe:expr) => {
        #[test]
        fn same_kernel_first_launch_from_many_threads() {
            common::same_kernel_first_launch_from_many_threads($device, $probe, 1_000_000);
        }

        #[test]
        fn distinct_kernels_first_launch_while_others_hit_cache() {
            common::distinct_kernels_first_launch_while_others_hit_cache(
                $device, $probe, 2_000_000,
            );
        }
    };
}

/// The cpu, and the first GPU where the build has a GPU backend and the machine a GPU.
pub fn cpu_and_gpu() -> Vec<Device> {
    let mut devices = vec![Device::cpu().unwrap()];
    if let Ok(gpu) = Device::lookup("gpu") {
        devices.push(gpu);
    }
    devices
}
