//! A helper process: this test binary run again to execute one ignored
//! test of its own (a lock holder, a leader) that the calling test can
//! kill, freeze or send lines to, and that reports what it does on its
//! stdout.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::time::{Duration, Instant};

use distlock_testkit::{resume_group, spawn_child, this_binary_running};
use lock_core::Locker;
use tokio::sync::mpsc;

use super::connect;

/// A running helper process and the lines it printed.
pub(crate) struct Helper {
    /// What the process is, as failures name it ("the holder").
    who: &'static str,
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::UnboundedReceiver<String>,
    /// Lines read while waiting for another one.
    seen: Vec<String>,
}

impl Helper {
    /// Runs the ignored test `test` of this binary in a process of its
    /// own (and process group), with `var` set to `url`; see
    /// [`helper_locker`].
    pub(crate) async fn start(who: &'static str, test: &str, var: &str, url: String) -> Self {
        let mut command = this_binary_running(test);
        command
            .env(var, url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = spawn_child(command).await.unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = lines_of(child.stdout.take().unwrap());
        Self {
            who,
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    /// What follows `word` on the first line that has it (read before or
    /// now), within `limit`.
    pub(crate) async fn expect(&mut self, word: &str, limit: Duration) -> String {
        // The test harness may print its own text before ours on a line.
        let find = |line: &str| {
            line.split_once(word)
                .map(|(_, rest)| rest.trim().to_owned())
        };
        if let Some(at) = self.seen.iter().position(|line| find(line).is_some()) {
            return find(&self.seen.remove(at)).unwrap();
        }
        let deadline = Instant::now() + limit;
        let who = self.who;
        loop {
            let line = tokio::time::timeout_at(deadline.into(), self.lines.recv())
                .await
                .unwrap_or_else(|_| panic!("{who} never said {word}"))
                .unwrap_or_else(|| panic!("{who} exited before saying {word}"));
            match find(&line) {
                Some(rest) => return rest,
                None => self.seen.push(line),
            }
        }
    }

    /// Writes `line` to the process's stdin.
    pub(crate) fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The process's pid, which is also its process group.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` to the process (not to its group).
    pub(crate) fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(self.pid() as libc::pid_t, signal) };
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = resume_group(self.pid());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lines `reader` yields, read on a thread of their own until it
/// ends or nobody listens any more.
pub(crate) fn lines_of(reader: impl Read + Send + 'static) -> mpsc::UnboundedReceiver<String> {
    let (tx, lines) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    lines
}

/// In a helper process, a locker on the URL its parent put in `var`;
/// `None` where the variable is not set (the ignored test run on its
/// own), and the test should return at once.
pub(crate) async fn helper_locker(var: &str) -> Option<Locker> {
    let url = std::env::var(var).ok()?;
    Some(connect(&url).await.unwrap())
}
