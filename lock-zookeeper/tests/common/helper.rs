//! A helper process: this test binary run again to execute one ignored
//! test of its own (a lock holder, a leader) that the calling test can
//! kill or freeze, and that reports what it does on stdout.

#![allow(dead_code)] // not every test binary uses every method

use std::process::Stdio;
use std::time::Duration;

use distlock_testkit::{signal_group, spawn_child, this_binary_running};
use tokio::sync::mpsc;
use tokio::time::timeout;

/// A running helper process and the lines it printed.
pub(crate) struct Helper {
    /// Its pid, also its process group (for signals).
    pub(crate) pid: u32,
    child: std::process::Child,
    lines: mpsc::UnboundedReceiver<String>,
}

impl Helper {
    /// Runs the ignored test `test` of this binary in a process of its
    /// own, with the environment variables `env` set.
    pub(crate) async fn start(test: &str, env: &[(&str, &str)]) -> Self {
        let mut command = this_binary_running(test);
        command
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = spawn_child(command).await.unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(stdout).map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Self {
            pid: child.id(),
            child,
            lines,
        }
    }

    /// The rest of the next line starting with `prefix`, within `limit`.
    pub(crate) async fn expect(&mut self, prefix: &str, limit: Duration) -> String {
        let found = timeout(limit, async {
            while let Some(line) = self.lines.recv().await {
                if let Some(rest) = line.strip_prefix(prefix) {
                    return Some(rest.to_owned());
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(rest)) => rest,
            Ok(None) => panic!("the helper process exited before printing {prefix:?}"),
            Err(_) => panic!("the helper process printed no {prefix:?} within {limit:?}"),
        }
    }

    /// Drops the lines printed so far.
    pub(crate) fn skip_printed(&mut self) {
        while self.lines.try_recv().is_ok() {}
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = signal_group(self.pid, libc::SIGKILL);
        let _ = self.child.wait();
    }
}
