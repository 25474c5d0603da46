//! The `jitbridge` command as a user meets it: help, versions, argument errors, pipes and
//! thread limits, run against the built binary.

mod common;

use common::finish;
use common::json::Reader;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const COMMANDS: [&str; 6] = ["run", "bench", "soak", "cache", "info", "help"];

fn jitbridge() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_jitbridge"));
    // Nothing here may touch the user's cache folder.
    command.env("JITBRIDGE_DISK_CACHE", "0");
    command.env("JITBRIDGE_CACHE_DIR", std::env::temp_dir().join("jitbridge-command-tests"));
    command
}

fn run(args: &[&str]) -> (i32, String, String) {
    let mut command = jitbridge();
    command.args(args);
    let output = finish(command, Duration::from_secs(120));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
}

fn assert_usage_error(args: &[&str], says: &str) {
    let (code, stdout, stderr) = run(args);
    assert_eq!(code, 2, "{args:?} exits 2; stderr: {stderr}");
    assert!(stdout.is_empty(), "{args:?} printed {stdout:?} on stdout");
    assert!(stderr.contains(says), "{args:?}: {stderr:?} does not say {says:?}");
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
}

#[test]
fn version_is_the_crate_version() {
    for flag in ["--version", "-V"] {
        let (code, stdout, _) = run(&[flag]);
        assert_eq!(code, 0);
        assert_eq!(stdout, format!("jitbridge {}\n", env!("CARGO_PKG_VERSION")));
    }
}

#[test]
fn every_command_has_help_both_ways() {
    for name in COMMANDS {
        let (code, by_help, _) = run(&["help", name]);
        assert_eq!(code, 0, "help {name}");
        assert!(by_help.starts_with(&format!("usage: jitbridge {name}")), "help {name}: {by_help}");
        for flag in ["--help", "-h"] {
            let (code, by_flag, _) = run(&[name, flag]);
            assert_eq!(code, 0, "{name} {flag}");
            assert_eq!(by_flag, by_help, "`{name} {flag}` and `help {name}` differ");
        }
    }
    let (code, overview, _) = run(&["help"]);
    assert_eq!(code, 0);
    for name in COMMANDS {
        assert!(overview.contains(&format!("\n  {name} ")), "the overview lacks {name}");
    }
    assert_eq!(run(&["--help"]).1, overview);
}

#[test]
fn unknown_arguments_are_errors_everywhere() {
    for name in COMMANDS {
        assert_usage_error(&[name, "--bogus"], "'--bogus'");
    }
    assert_usage_error(&["--bogus"], "'--bogus'");
    assert_usage_error(&["bogus"], "no command 'bogus'");
    assert_usage_error(&["help", "bogus"], "no command 'bogus'");
    assert_usage_error(&["info", "extra"], "unexpected argument 'extra'");
    assert_usage_error(&["run", "extra"], "unexpected argument 'extra'");
    assert_usage_error(&["bench", "extra"], "unexpected argument 'extra'");
    assert_usage_error(&["cache", "show", "extra"], "unexpected argument 'extra'");
    assert_usage_error(&["cache", "bogus"], "unknown cache action 'bogus'");
    assert_usage_error(&["bench", "--json=yes"], "--json takes no value");
    assert_usage_error(&["--version", "extra"], "--version takes no arguments");
}

/// A word that is no command, and a top-level argument the command does not take, show the
/// main usage and the commands there are; a command's own bad arguments show that command's.
#[test]
fn a_bad_command_or_top_level_argument_shows_the_main_usage() {
    let main_usage = "usage: jitbridge [COMMAND] [OPTIONS]\n";
    for (args, says) in [
        (&["frob"][..], "no command 'frob'"),
        (&["version"], "no command 'version' (the version: jitbridge --version)"),
        (&["help", "nope"], "no command 'nope'"),
        (&["--version", "extra"], "--version takes no arguments"),
        (&["--bogus"], "unknown option '--bogus'"),
        (&["--bogus=1", "run"], "unknown option '--bogus=1'"),
    ] {
        assert_usage_error(args, says);
        let (_, _, stderr) = run(args);
        assert!(stderr.contains(main_usage), "{args:?} does not show the main usage: {stderr}");
        assert!(stderr.contains("commands: run, bench, soak, cache, info, help\n"), "{stderr}");
        assert!(!stderr.contains("jitbridge help [COMMAND]"), "{args:?}: help's usage: {stderr}");
    }
    for (args, usage) in [
        (&["--threads", "0"][..], "usage: jitbridge run "),
        (&["run", "--bogus"], "usage: jitbridge run "),
        (&["help", "run", "extra"], "usage: jitbridge help [COMMAND]"),
    ] {
        let (code, _, stderr) = run(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(usage), "{args:?} does not show {usage:?}: {stderr}");
        assert!(!stderr.contains(main_usage), "{args:?} shows the main usage: {stderr}");
    }
}

/// `--device cuda` and `--device gpu` in a build without a GPU backend: one code, one message.
#[cfg(not(any(feature = "cuda", feature = "rocm")))]
#[test]
fn a_gpu_this_build_lacks_is_unsupported_by_any_name() {
    for device in ["gpu", "cuda", "rocm:0"] {
        let (code, stdout, stderr) = run(&["run", "--device", device, "--rounds", "1"]);
        assert_eq!(code, 2, "{device}: {stderr}");
        assert!(stdout.is_empty(), "{device}: {stdout}");
        let says =
            format!("jitbridge: unsupported: no device {device}: jitbridge was built without");
        assert!(stderr.starts_with(&says), "{device}: {stderr}");
    }
}

#[test]
fn an_argument_that_is_not_utf8_is_a_usage_error() {
    use std::os::unix::ffi::OsStrExt;
    for args in
        [&[&b"\xff"[..]][..], &[b"run", b"--device", b"cpu\xff"], &[b"cache", b"prune", b"1\xffM"]]
    {
        let mut command = jitbridge();
        command.args(args.iter().map(|a| std::ffi::OsStr::from_bytes(a)));
        let output = finish(command, Duration::from_secs(60));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?} exits 2; stderr: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
        assert!(stderr.contains("is not valid UTF-8"), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?} printed on stdout");
    }
}

#[test]
fn a_missing_value_says_what_is_missing() {
    assert_usage_error(&["run", "--threads"], "--threads needs a value: the number of threads");
    assert_usage_error(&["run", "--rounds"], "--rounds needs a value: the number of rounds");
    assert_usage_error(&["run", "--device"], "--device needs a value: a device");
    assert_usage_error(&["bench", "--device"], "--device needs a value: a device");
    assert_usage_error(&["cache", "prune"], "cache prune needs a SIZE");
}

#[test]
fn sizes_are_checked_before_the_cache_is_touched() {
    assert_usage_error(&["cache", "prune", "1.5G"], "'1.5G' is not a size");
    assert_usage_error(&["cache", "prune", "100XB"], "'100XB' is not a size");
    assert_usage_error(&["cache", "prune", "99999999999T"], "too large");
}

#[test]
fn thread_and_round_counts_have_stated_bounds() {
    for count in ["0", "1025", "100000", "18446744073709551615", "99999999999999999999999"] {
        assert_usage_error(
            &["run", "--threads", count],
            "--threads takes a whole number from 1 to 1024",
        );
    }
    assert_usage_error(&["run", "--threads", "-3"], "from 1 to 1024");
    assert_usage_error(
        &["run", "--rounds", "100001"],
        "--rounds takes a whole number from 1 to 100000",
    );
    assert_usage_error(&["--rounds", "x"], "--rounds takes a whole number");
}

/// Threads that cannot be started end `run` and `bench` with a clear error, not a panic or a
/// hang: the address space is capped and every thread asks for a 128 MiB stack, so a few start
/// and then starting one fails while the first ones wait at the barrier.
#[test]
fn a_thread_that_cannot_start_is_an_error_not_a_hang() {
    let run = ["run", "--device", "cpu", "--threads", "64", "--rounds", "1"];
    let bench = ["bench", "--quick", "--device", "cpu"];
    for args in [&run[..], &bench[..]] {
        let mut command = Command::new("sh");
        command
            .args(["-c", "ulimit -v 2000000 && exec \"$0\" \"$@\""])
            .arg(env!("CARGO_BIN_EXE_jitbridge"))
            .args(args)
            .env("RUST_MIN_STACK", (128u64 << 20).to_string())
            .env("JITBRIDGE_DISK_CACHE", "0");
        let output = finish(command, Duration::from_secs(120));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("jitbridge: cannot start thread"), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// `jitbridge info | head -1`: the reader is gone before the first line is written.
#[test]
fn a_closed_pipe_ends_quietly() {
    for args in [&["info"][..], &["help"], &["--version"], &["cache", "--help"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut command = jitbridge();
        command.args(args).stdout(writer).stderr(Stdio::piped());
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{args:?} on a closed pipe: {stderr}");
        assert!(stderr.is_empty(), "{args:?} on a closed pipe said: {stderr}");
    }
}

#[test]
fn progress_is_plain_lines_when_not_on_a_terminal() {
    let (code, stdout, stderr) =
        run(&["run", "--device", "cpu", "--threads", "2", "--rounds", "4"]);
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(!stdout.contains('\r') && !stderr.contains('\r'), "a carriage return: {stderr:?}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines, ["round 1/4", "round 2/4", "round 3/4", "round 4/4"]);
    assert!(stdout.contains("exact        yes, every output"), "{stdout}");
}

/// `info` in a new process: the disk cache's state on a line of its own (it used to read
/// "(off (JITBRIDGE_DISK_CACHE=0))") and what the cache holds, not the process's counters
/// (always 0 there).
#[test]
fn info_shows_the_disk_cache_state_and_size_not_empty_counters() {
    let (code, stdout, stderr) = run(&["info"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("\ncache state  off (JITBRIDGE_DISK_CACHE=0)\n"), "{stdout}");
    assert!(!stdout.contains("(("), "doubled parentheses: {stdout}");
    assert!(!stdout.contains("counters") && !stdout.contains("builds 0"), "{stdout}");
    let dir = std::env::temp_dir().join(format!("jitbridge-info-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let with_cache = |args: &[&str]| {
        let mut command = jitbridge();
        command.env_remove("JITBRIDGE_DISK_CACHE").env("JITBRIDGE_CACHE_DIR", &dir).args(args);
        let output = finish(command, Duration::from_secs(120));
        assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    };
    let empty = with_cache(&["info"]);
    assert!(empty.contains("\ncache state  on"), "{empty}");
    assert!(empty.contains("\ncache size   0 entries, 0 bytes\n"), "{empty}");
    with_cache(&["__first-launch", "cpu"]); // stores one entry
    let one = with_cache(&["info"]);
    assert!(one.contains(&format!("\ndisk cache   {}\n", dir.display())), "{one}");
    assert!(one.contains("\ncache size   1 entry, "), "{one}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Only `--cfg jitbridge_remove_lock` removes a lock; CI also runs this test built with a stray
/// JITBRIDGE_REMOVE_LOCK in the environment, which must change nothing.
#[cfg(not(jitbridge_remove_lock))]
#[test]
fn a_normal_build_has_every_lock() {
    let (code, stdout, stderr) = run(&["info"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stdout.contains("without locks"), "a normal build lacks a lock:\n{stdout}");
}

/// bench's section 6 salts its child's source so NVRTC's compute cache (CUDA) holds nothing for
/// it: the same salt finds the entry the first child stored, another salt is a new source.
#[test]
fn first_launch_child_salt_makes_a_new_source() {
    let dir = std::env::temp_dir().join(format!("jitbridge-salt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let child = |args: &[&str]| {
        let mut command = jitbridge();
        command.env_remove("JITBRIDGE_DISK_CACHE").env("JITBRIDGE_CACHE_DIR", &dir);
        command.arg("__first-launch").args(args);
        finish(command, Duration::from_secs(120))
    };
    let hits = |out: &Output| {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(text.contains("exact=true"), "{text}");
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix("disk_hits=")?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no disk_hits in {text}"))
    };
    assert_eq!(hits(&child(&["cpu", "salt 1"])), 0);
    assert_eq!(hits(&child(&["cpu", "salt 1"])), 1, "the same salt is the same source");
    assert_eq!(hits(&child(&["cpu", "salt 2"])), 0, "another salt is another source");
    let extra = child(&["cpu", "salt 1", "more"]);
    assert_eq!(extra.status.code(), Some(2), "a third argument is a usage error");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `info --json` is one JSON object of docs/JSON.md's schema that a dashboard reads: the seal
/// mode (JITBRIDGE_SEAL) and every counter by its field name, the slow path's among them.
#[test]
fn info_json_names_the_seal_and_every_counter() {
    let mut command = jitbridge();
    command.args(["info", "--json"]).env("JITBRIDGE_SEAL", "warn");
    let output = finish(command, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(stdout.trim().lines().count(), 1, "{stdout}");
    let info = Reader::parse(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(info.get("schema").number(), Some(1.0), "{stdout}");
    assert_eq!(info.get("command").text(), "info");
    assert_eq!(info.get("seal").text(), "warn");
    assert!(!info.get("devices").list().is_empty(), "the cpu device at least: {stdout}");
    assert!(!info.at(&["disk_cache", "dir"]).text().is_empty());
    let counters = info.get("counters");
    for (name, _) in jitbridge::Counters::default().fields() {
        assert_eq!(counters.get(name).number(), Some(0.0), "{name}: {stdout}");
    }
}
