//! Progress on stderr while a long command runs: one line redrawn in place on a terminal, a
//! plain line per step otherwise (a log or a pipe keeps every step, and no carriage return).

use std::io::{self, IsTerminal, Write};

pub struct Progress {
    terminal: bool,
    /// A line is on the terminal, not yet ended.
    open: bool,
}

impl Progress {
    pub fn new() -> Self {
        Progress { terminal: io::stderr().is_terminal(), open: false }
    }

    pub fn terminal(&self) -> bool {
        self.terminal
    }

    /// Shows `line`: in place of the last one on a terminal (the rest of it cleared), as a line
    /// of its own otherwise.
    pub fn show(&mut self, line: &str) {
        if self.terminal {
            let _ = write!(io::stderr(), "\r{line}\x1b[K");
            self.open = true;
        } else {
            note!("{line}");
        }
    }

    /// Ends the redrawn line, so that what follows starts on a line of its own.
    pub fn finish(&mut self) {
        if std::mem::take(&mut self.open) {
            note!();
        }
    }
}
