//! A run of this test binary as a child process: one ignored test, told
//! what to do through an environment variable, reporting line by line on
//! its stdout. For lock holders and leaders that a fault test pauses or
//! kills.

use std::fmt;
use std::time::Duration;

use lock_core::{LockError, LockGuard, LockOptions, Locker};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use crate::{signal_group, spawn_child, this_binary_running};

/// How a child holder takes its lock: a plain lock (the default, what
/// every holder took before read-write locks were tested under faults),
/// or the read or the write lock of the name's
/// [`RwLock`](lock_core::RwLock).
///
/// A child's spec may start with the mode's word ([`HoldMode::split`]);
/// a spec without one is a plain lock, so existing specs keep their
/// meaning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HoldMode {
    /// [`Locker::lock_with`].
    #[default]
    Lock,
    /// [`RwLock::read_with`](lock_core::RwLock::read_with).
    Read,
    /// [`RwLock::write_with`](lock_core::RwLock::write_with).
    Write,
}

impl HoldMode {
    /// `"lock"`, `"read"` or `"write"`: the word a spec starts with.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Read => "read",
            Self::Write => "write",
        }
    }

    /// The mode `word` names, if any.
    pub fn parse(word: &str) -> Option<Self> {
        [Self::Lock, Self::Read, Self::Write]
            .into_iter()
            .find(|mode| mode.as_str() == word)
    }

    /// `spec` with `mode` in front, as [`HoldMode::split`] reads it.
    pub fn spec(self, rest: &str) -> String {
        format!("{} {rest}", self.as_str())
    }

    /// A child's spec split into its mode and the rest: `"read URL KEY"`
    /// is `(Read, "URL KEY")`; a spec whose first word names no mode is
    /// `(Lock, spec)`, whole.
    pub fn split(spec: &str) -> (Self, &str) {
        match spec.split_once(' ') {
            Some((word, rest)) => match Self::parse(word) {
                Some(mode) => (mode, rest),
                None => (Self::Lock, spec),
            },
            None => (Self::Lock, spec),
        }
    }

    /// Takes `key` through `locker` in this mode, with `options`.
    pub async fn take(
        self,
        locker: &Locker,
        key: &str,
        options: LockOptions,
    ) -> Result<LockGuard, LockError> {
        match self {
            Self::Lock => locker.lock_with(key, options).await,
            Self::Read => locker.rwlock(key)?.read_with(options).await,
            Self::Write => locker.rwlock(key)?.write_with(options).await,
        }
    }
}

impl fmt::Display for HoldMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A child process and the lines it printed.
#[derive(Debug)]
pub struct TestChild {
    child: std::process::Child,
    /// The lines the child printed on its stdout, in order.
    pub lines: mpsc::UnboundedReceiver<String>,
}

impl TestChild {
    /// Runs the ignored test `test` of this binary with `var=value` set.
    ///
    /// # Panics
    ///
    /// If the child cannot be spawned.
    pub async fn spawn(test: &str, var: &str, value: &str) -> TestChild {
        let mut command = this_binary_running(test);
        command.env(var, value);
        Self::start(command).await
    }

    /// Runs `command` as a child (in a process group of its own, see
    /// [`spawn_child`]), its stdout read line by line, its stderr shown.
    ///
    /// # Panics
    ///
    /// If the child cannot be spawned.
    pub async fn start(mut command: std::process::Command) -> TestChild {
        command
            .stdout(std::process::Stdio::piped())
            // Its panics show in the test's output.
            .stderr(std::process::Stdio::inherit());
        let mut child = spawn_child(command).await.expect("spawn the child");
        let stdout = tokio::process::ChildStdout::from_std(child.stdout.take().unwrap()).unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                let _ = tx.send(line);
            }
        });
        TestChild { child, lines }
    }

    /// The child's pid, which is also its process group.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line starting with `prefix` (others skipped), its rest.
    ///
    /// # Panics
    ///
    /// If the child exits or stays silent for 20 s first.
    pub async fn expect(&mut self, prefix: &str) -> String {
        let found = tokio::time::timeout(Duration::from_secs(20), async {
            while let Some(line) = self.lines.recv().await {
                if let Some(rest) = line.strip_prefix(prefix) {
                    return rest.trim().to_owned();
                }
            }
            panic!("the child exited before printing {prefix}");
        });
        found
            .await
            .unwrap_or_else(|_| panic!("no {prefix} from the child"))
    }

    /// The next line, failing if none comes within `within`.
    ///
    /// # Panics
    ///
    /// If the child exits first.
    pub async fn next_line(&mut self, within: Duration) -> String {
        tokio::time::timeout(within, self.lines.recv())
            .await
            .expect("the child went silent")
            .expect("the child exited")
    }
}

impl Drop for TestChild {
    fn drop(&mut self) {
        let _ = signal_group(self.child.id(), libc::SIGKILL);
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::HoldMode;

    #[test]
    fn a_spec_without_a_mode_is_a_plain_lock() {
        assert_eq!(HoldMode::split("read k url"), (HoldMode::Read, "k url"));
        assert_eq!(HoldMode::split("write k url"), (HoldMode::Write, "k url"));
        assert_eq!(HoldMode::split("lock k"), (HoldMode::Lock, "k"));
        assert_eq!(
            HoldMode::split("redis://h/ k"),
            (HoldMode::Lock, "redis://h/ k")
        );
        assert_eq!(HoldMode::split("k"), (HoldMode::Lock, "k"));
        assert_eq!(HoldMode::Write.spec("k url"), "write k url");
        assert_eq!(HoldMode::default(), HoldMode::Lock);
    }
}
