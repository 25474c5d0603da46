//! The `jitbridge` command: runs the race-probe scenario and reports, or prints what it sees.
//! Each subcommand lives in its own module; `args` parses every command's options one way.

use std::io::{self, Write};

/// Prints a line on stdout. A reader that went away (`jitbridge info | head -1`) ends the
/// command quietly with status 0; any other write failure is an error.
macro_rules! out {
    () => { $crate::write_line(format_args!("")) };
    ($($arg:tt)*) => { $crate::write_line(format_args!($($arg)*)) };
}

/// Prints a line on stderr, ignoring a closed stderr: a note is never worth a panic.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod args;
mod bench;
mod cache;
mod cache_build;
mod cache_remote;
mod help;
mod histogram;
mod host;
mod info;
mod json;
mod progress;
mod rows;
mod run;
mod soak;
mod table;

use args::{Command, text_args};
use help::MAIN;
use std::process::ExitCode;

fn write_line(args: std::fmt::Arguments<'_>) {
    let mut stdout = io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.write_all(b"\n")) {
        if e.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        note!("jitbridge: cannot write the output: {e}");
        std::process::exit(2);
    }
}

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// How a command ends: `Ok(true)` success, `Ok(false)` a check failed (status 1).
enum Failure {
    /// Bad arguments: the message, and the command whose usage to show.
    Usage(String, &'static Command),
    /// The command could not do its work.
    Error(String),
}

impl From<jitbridge::Error> for Failure {
    fn from(e: jitbridge::Error) -> Self {
        Failure::Error(e.to_string())
    }
}

type Outcome = Result<bool, Failure>;

fn dispatch(args: &[String]) -> Outcome {
    let rest = args.get(1..).unwrap_or(&[]);
    match args.first().map(String::as_str) {
        Some("--version" | "-V") if rest.is_empty() => {
            out!("jitbridge {VERSION}");
            Ok(true)
        }
        Some("--version" | "-V") => {
            Err(Failure::Usage("--version takes no arguments".into(), &MAIN))
        }
        Some("--help" | "-h") => help::help_command(rest),
        Some("help") => help::help_command(rest),
        Some("run") => run::run_command(rest),
        Some("bench") => bench::bench_command(rest),
        Some("soak") => soak::soak_command(rest),
        Some("cache") => cache::cache_command(rest),
        Some("info") => info::info_command(rest),
        Some("__first-launch") => bench::new_process::first_launch(rest),
        Some("__warm-start") => bench::warm_start::child(rest),
        Some(jitbridge::disk_cache::BUILD_WORKER_ARG) => cache_build::worker(rest),
        // `jitbridge` alone, or with run's options only, runs.
        None => run::run_command(args),
        Some(first) if run::takes_option(first) => run::run_command(args),
        Some(first) if first.starts_with('-') => {
            Err(Failure::Usage(format!("unknown option '{first}'"), &MAIN))
        }
        Some(other) => Err(help::no_such_command(other)),
    }
}

fn main() -> ExitCode {
    match text_args().and_then(|args| dispatch(&args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(Failure::Usage(message, c)) => {
            note!("jitbridge: {message}");
            note!("usage: {}", c.usage);
            if c.name == MAIN.name {
                note!("commands: {}", help::command_names());
                note!("(`jitbridge help` for more)");
            } else {
                note!("(`jitbridge help {}` for more)", c.name);
            }
            ExitCode::from(2)
        }
        Err(Failure::Error(message)) => {
            note!("jitbridge: {message}");
            ExitCode::from(2)
        }
    }
}
