//! A run of this test binary as a child process: one ignored test, told
//! what to do through an environment variable, reporting line by line on
//! its stdout. For lock holders and leaders that a fault test pauses or
//! kills.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use crate::{signal_group, spawn_child, this_binary_running};

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
        command
            .env(var, value)
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
