//! A run of this test binary as a child process: one ignored test, told
//! what to do through an environment variable, reporting line by line on
//! its stdout. For lock holders and leaders that must be paused or killed.

use std::time::{Duration, Instant};

use distlock_testkit::{
    assert_not_before, signal_group, spawn_child, this_binary_running, FencedResource,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

/// How long a child's 2 s lease, renewed every third of it, runs at
/// least after the child is frozen.
pub(crate) const LEASE_LEFT: Duration = Duration::from_millis(1200);

/// The successor of a child frozen at `paused_at`, with token (or term)
/// `new` after the child's `old`: panics unless it came in no sooner than
/// the child's lease could end and `new` is above `old`, then writes
/// `value` to `resource` with `new`.
#[allow(dead_code)] // each binary uses what it needs
pub(crate) fn successor_writes(
    resource: &FencedResource,
    paused_at: Instant,
    (old, new): (u64, u64),
    value: &str,
) {
    assert_not_before(paused_at, LEASE_LEFT, "in after the pause, the lease alive");
    assert!(new > old, "{new} after {old}");
    resource.write(new, value).unwrap();
}

/// A child process and the lines it printed.
pub(crate) struct Child {
    child: std::process::Child,
    pub(crate) lines: mpsc::UnboundedReceiver<String>,
}

impl Child {
    /// Runs the ignored test `test` of this binary with `var=value` set.
    pub(crate) async fn spawn(test: &str, var: &str, value: &str) -> Child {
        let mut command = this_binary_running(test);
        command
            .env(var, value)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        let mut child = spawn_child(command).await.expect("spawn the child");
        let stdout = tokio::process::ChildStdout::from_std(child.stdout.take().unwrap()).unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                let _ = tx.send(line);
            }
        });
        Child { child, lines }
    }

    /// The child's pid, which is also its process group.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line starting with `prefix` (others skipped), its rest.
    pub(crate) async fn expect(&mut self, prefix: &str) -> String {
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
    pub(crate) async fn next_line(&mut self, within: Duration) -> String {
        tokio::time::timeout(within, self.lines.recv())
            .await
            .expect("the child went silent")
            .expect("the child exited")
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = signal_group(self.child.id(), libc::SIGKILL);
        let _ = self.child.wait();
    }
}
