//! The soak's forked child: midway, a child process compiles and launches a new kernel on the
//! cpu and exits; the parent waits for it, within a deadline.

use super::worker_loops::{EMBED_BODY, embed_want, exact_f32, worker_kernel};
use jitbridge::{Array, DType, Device, LaunchShape, Stream, streams};
use std::time::{Duration, Instant};

/// Longest wait for the forked child before it is killed (it may be stuck on a lock).
const CHILD_DEADLINE: Duration = Duration::from_secs(30);

unsafe extern "C" {
    fn fork() -> i32;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn kill(pid: i32, signal: i32) -> i32;
}
const WNOHANG: i32 = 1;
const SIGKILL: i32 = 9;

/// In the forked child: compile and launch a new kernel on the cpu on a stream of its own, then
/// exit through `exit` (atexit handlers run, as in any child that returns). Never returns.
fn child_compiles_and_exits(salt: u64) -> ! {
    let run = || -> Result<bool, jitbridge::Error> {
        let cpu = Device::cpu()?;
        let stream = Stream::new(cpu)?;
        let _guard = streams::install_thread_local_default_stream(&stream)?;
        let kernel = worker_kernel("soak_child", EMBED_BODY, 64, salt as usize)?;
        let inp = Array::arange(cpu, 256, DType::F32)?;
        // SAFETY: EMBED_BODY bounds its index by out_size; the input has 256 elements too.
        let out =
            unsafe { kernel.launch_unchecked(&[&inp], &[&[256]], LaunchShape::Threads(256))? };
        let v = out[0].to_vec::<f32>()?;
        Ok(exact_f32(&v, |i| embed_want(i as f32, 64, salt as usize)))
    };
    std::process::exit(match run() {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(_) => 2,
    })
}

/// Forks a child that compiles and exits; waits for it (killing it past CHILD_DEADLINE).
pub fn fork_child(salt: u64) -> Result<(), String> {
    // SAFETY: the child only runs the library and exits; it never returns here.
    let pid = unsafe { fork() };
    if pid < 0 {
        return Err(format!("fork failed: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        child_compiles_and_exits(salt);
    }
    let deadline = Instant::now() + CHILD_DEADLINE;
    let mut status = 0;
    loop {
        // SAFETY: our own child, a valid status pointer.
        let r = unsafe { waitpid(pid, &mut status, WNOHANG) };
        if r == pid {
            break;
        }
        if r < 0 {
            return Err(format!("waitpid: {}", std::io::Error::last_os_error()));
        }
        if Instant::now() > deadline {
            // SAFETY: our own child, not yet reaped.
            unsafe {
                kill(pid, SIGKILL);
                waitpid(pid, &mut status, 0);
            }
            return Err(format!(
                "the forked child did not finish in {} s (stuck on a lock taken before the fork?)",
                CHILD_DEADLINE.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (signal, code) = (status & 0x7f, (status >> 8) & 0xff);
    match (signal, code) {
        (0, 0) => Ok(()),
        (0, 1) => Err("the forked child's output was not exact".into()),
        (0, 2) => Err("the forked child's compile or launch failed".into()),
        (0, c) => Err(format!("the forked child exited with status {c}")),
        (s, _) => Err(format!("the forked child died of signal {s}")),
    }
}
