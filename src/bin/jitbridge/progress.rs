//! Progress on stderr while a long command runs.

use std::io::{self, IsTerminal, Write};

/// Shows "round i/n" on stderr: redrawn in place on a terminal, one plain line each otherwise.
pub struct Progress {
    terminal: bool,
}

impl Progress {
    pub fn new() -> Self {
        Progress { terminal: io::stderr().is_terminal() }
    }
    pub fn round(&self, done: usize, total: usize) {
        if self.terminal {
            let _ = write!(io::stderr(), "\rround {done}/{total}");
        } else {
            note!("round {done}/{total}");
        }
    }
    pub fn finish(&self) {
        if self.terminal {
            note!();
        }
    }
}
