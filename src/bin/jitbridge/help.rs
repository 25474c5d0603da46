//! `jitbridge help`: the overview of the commands, and each command's own help.

use crate::args::{Command, print_help};
use crate::{Failure, Outcome, VERSION, bench, cache, info, run, soak};

/// The command as a whole: its usage is what a bad command or top-level argument shows.
pub const MAIN: Command = Command {
    name: "jitbridge",
    usage: "jitbridge [COMMAND] [OPTIONS]",
    about: "run-time compiled kernels behind a locked module cache",
    details: "",
};

pub const HELP: Command = Command {
    name: "help",
    usage: "jitbridge help [COMMAND]",
    about: "print this help, or a command's",
    details: "",
};

pub const COMMANDS: [&Command; 6] =
    [&run::RUN, &bench::BENCH, &soak::SOAK, &cache::CACHE, &info::INFO, &HELP];

pub fn command(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().copied().find(|c| c.name == name)
}

/// "run, bench, soak, cache, info, help".
pub fn command_names() -> String {
    COMMANDS.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
}

/// The error for a word that names no command (the main usage lists those there are);
/// `version` gets a pointer to `--version`.
pub fn no_such_command(name: &str) -> Failure {
    let hint = if name == "version" { " (the version: jitbridge --version)" } else { "" };
    Failure::Usage(format!("no command '{name}'{hint}"), &MAIN)
}

pub fn print_overview() {
    out!("jitbridge {VERSION}: {}", MAIN.about);
    out!();
    out!("usage: {}", MAIN.usage);
    out!();
    out!("commands:");
    for c in COMMANDS {
        out!("  {:<7} {}", c.name, c.about);
    }
    out!();
    out!("`jitbridge help COMMAND` or `jitbridge COMMAND --help` shows a command's options;");
    out!("`jitbridge --version` prints the version. Without a command, `run` runs.");
}

pub fn help_command(args: &[String]) -> Outcome {
    match args {
        [] => print_overview(),
        [name] if name == "--help" || name == "-h" => print_help(&HELP),
        [name] => match command(name) {
            Some(c) => print_help(c),
            None => return Err(no_such_command(name)),
        },
        [_, extra, ..] => {
            return Err(Failure::Usage(format!("unexpected argument '{extra}'"), &HELP));
        }
    }
    Ok(true)
}
