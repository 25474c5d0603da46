//! `jitbridge soak` as a user meets it: its arguments checked, its help.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn jitbridge(cache: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_jitbridge"));
    command.env("JITBRIDGE_CACHE_DIR", cache).env_remove("JITBRIDGE_DISK_CACHE");
    command
}

/// (exit status, stdout, stderr); a run still going after `limit` fails the test (a hang).
fn finish(mut command: Command, limit: Duration) -> (i32, String, String) {
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().expect("start jitbridge");
    let (mut stdout, mut stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).map(|_| text)
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).map(|_| text)
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
    (status.code().unwrap_or(-1), out.join().unwrap().unwrap(), err.join().unwrap().unwrap())
}

#[test]
fn soak_arguments_are_checked() {
    let cache = std::env::temp_dir().join("jitbridge-soak-args-test");
    for (args, says) in [
        (&["soak", "--seconds", "0"][..], "--seconds takes a whole number from 1 to 86400"),
        (&["soak", "--seconds", "1.5"], "--seconds takes a whole number"),
        (&["soak", "--seconds", "86401"], "out of range"),
        (&["soak", "--seconds"], "--seconds needs a value"),
        (&["soak", "--bogus"], "unknown option '--bogus'"),
        (&["soak", "extra"], "unexpected argument 'extra'"),
        (&["soak", "--json=yes"], "--json takes no value"),
        (&["soak", "--device", "tpu"], "tpu"),
    ] {
        let (code, stdout, stderr) = finish(
            {
                let mut c = jitbridge(&cache);
                c.args(args);
                c
            },
            Duration::from_secs(60),
        );
        assert_eq!(code, 2, "{args:?} exits 2: {stderr}");
        assert!(stdout.is_empty(), "{args:?} printed {stdout}");
        assert!(stderr.contains(says), "{args:?}: {stderr:?} does not say {says:?}");
    }
    let (code, stdout, _) = finish(
        {
            let mut c = jitbridge(&cache);
            c.args(["soak", "--help"]);
            c
        },
        Duration::from_secs(60),
    );
    assert_eq!(code, 0);
    assert!(stdout.starts_with("usage: jitbridge soak [--seconds N]"), "{stdout}");
}
