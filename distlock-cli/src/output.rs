//! Writing to stdout and stderr without panicking.
//!
//! `println!` panics when stdout is a closed pipe (`distlock status k |
//! head -c0`); a lock tool must not turn that into a panic message, and a
//! half-written report is not worth more than a quiet exit.

use std::io::{self, Write};
use std::sync::atomic::AtomicBool;

use crate::exit::Failure;

/// While set, panics print nothing (`check` reports them itself).
pub(crate) static QUIET_PANICS: AtomicBool = AtomicBool::new(false);

/// Writes `text` and a newline to stdout. A closed pipe ends the command
/// with exit code 1 and no message; other write errors are reported.
pub(crate) fn line(text: &str) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => {
            Err(Failure::silent(crate::exit::FAILURE))
        }
        Err(error) => Err(Failure::other(format!("cannot write to stdout: {error}"))),
    }
}

/// Prints `distlock: MESSAGE` on stderr: one line, whatever the message.
pub(crate) fn say(message: &str) {
    let _ = writeln!(
        io::stderr().lock(),
        "distlock: {}",
        crate::exit::one_line(message)
    );
}
