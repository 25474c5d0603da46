//! Runs a command with its stderr on a pseudo-terminal: what a person at a terminal sees.

use std::ffi::{CStr, c_char};
use std::fs::File;
use std::io::Read;
use std::os::fd::FromRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

unsafe extern "C" {
    fn posix_openpt(flags: i32) -> i32;
    fn grantpt(fd: i32) -> i32;
    fn unlockpt(fd: i32) -> i32;
    fn ptsname_r(fd: i32, buf: *mut c_char, len: usize) -> i32;
}
const O_RDWR: i32 = 2;
const O_NOCTTY: i32 = 0o400;

/// What a run with stderr on a terminal wrote.
pub struct TerminalRun {
    pub status: ExitStatus,
    pub stdout: String,
    /// The terminal's bytes, with the line discipline's "\r\n" for each newline turned back
    /// into "\n": a "\r" left is one the command wrote.
    pub stderr: String,
}

/// Runs `command` with stdin empty, stdout a pipe and stderr a pseudo-terminal; a run still
/// going after `limit` fails the test (a hang).
pub fn stderr_on_a_terminal(mut command: Command, limit: Duration) -> TerminalRun {
    // SAFETY: plain calls on a descriptor this function owns; the name buffer is large enough
    // and NUL-terminated by ptsname_r.
    let (master, name) = unsafe {
        let fd = posix_openpt(O_RDWR | O_NOCTTY);
        assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        let master = File::from_raw_fd(fd);
        assert_eq!(grantpt(fd), 0, "grantpt");
        assert_eq!(unlockpt(fd), 0, "unlockpt");
        let mut buf = [0 as c_char; 128];
        assert_eq!(ptsname_r(fd, buf.as_mut_ptr(), buf.len()), 0, "ptsname_r");
        (master, CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned())
    };
    let terminal = File::options().read(true).write(true).custom_flags(O_NOCTTY).open(&name);
    let terminal = terminal.unwrap_or_else(|e| panic!("open {name}: {e}"));
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::from(terminal));
    let mut child = command.spawn().expect("start the command");
    // The command keeps its copy of the terminal until dropped: only then does reading the
    // master end when the child exits.
    drop(command);
    let mut stdout = child.stdout.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).map(|_| text)
    });
    let err = std::thread::spawn(move || {
        let (mut master, mut bytes, mut chunk) = (master, Vec::new(), [0u8; 4096]);
        // Ends with EIO once no process has the terminal open.
        while let Ok(n @ 1..) = master.read(&mut chunk) {
            bytes.extend_from_slice(&chunk[..n]);
        }
        bytes
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {limit:?} with stderr on a terminal: it hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = String::from_utf8_lossy(&err.join().unwrap()).replace("\r\n", "\n");
    TerminalRun { status, stdout: out.join().unwrap().unwrap(), stderr }
}
