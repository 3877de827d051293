//! A `distlock` process the test talks to while it runs: its stdout and
//! stderr arrive line by line, its stdin lets CMD go on (`read x` in CMD's
//! script returns when the test calls [`Running::proceed`]).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::Duration;

use super::{signal, wait, LIMIT};

/// A running `distlock`; killed on drop if it is still running.
pub struct Running {
    pub child: Child,
    stdin: Option<ChildStdin>,
    out: Receiver<String>,
    err: Receiver<String>,
}

impl Running {
    /// Spawns `command` with its stdin, stdout and stderr piped.
    pub fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn distlock");
        let stdin = child.stdin.take();
        let out = forward_lines(child.stdout.take().expect("piped stdout"));
        let err = forward_lines(child.stderr.take().expect("piped stderr"));
        Self {
            child,
            stdin,
            out,
            err,
        }
    }

    /// The next line on stdout; fails the test after [`LIMIT`] or at the
    /// end of the output.
    pub fn line(&self, what: &str) -> String {
        next(&self.out, LIMIT).unwrap_or_else(|| {
            let stderr: Vec<String> = self.err.try_iter().collect();
            panic!("no stdout line for {what}; stderr: {stderr:?}")
        })
    }

    /// The next line on stderr, as [`line`](Self::line).
    pub fn err_line(&self, what: &str) -> String {
        next(&self.err, LIMIT).unwrap_or_else(|| panic!("no stderr line for {what}"))
    }

    /// Whether stdout has a line ready now.
    pub fn has_line(&self) -> bool {
        next(&self.out, Duration::ZERO).is_some()
    }

    /// Lets CMD's `read x` return.
    pub fn proceed(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        writeln!(stdin, "go").expect("write to CMD's stdin");
        stdin.flush().expect("flush CMD's stdin");
    }

    /// Sends `number` to the distlock process.
    pub fn signal(&self, number: i32) {
        signal(self.child.id(), number);
    }

    /// Waits for distlock to exit within [`LIMIT`].
    pub fn wait(&mut self) -> ExitStatus {
        wait(&mut self.child)
    }

    /// What is left on stderr once the process has exited.
    pub fn rest_of_stderr(&self) -> Vec<String> {
        self.err.iter().collect()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A channel that gets every line `source` produces.
fn forward_lines(source: impl Read + Send + 'static) -> Receiver<String> {
    let (send, receive) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(source).lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    receive
}

/// The next line within `limit`; `None` after it or at the end.
fn next(lines: &Receiver<String>, limit: Duration) -> Option<String> {
    lines.recv_timeout(limit).ok()
}
