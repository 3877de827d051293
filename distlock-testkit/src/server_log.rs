//! Reading a server's log: its tail, and the lines that tell why it failed.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// Whether a server log blames a port taken by someone else.
pub(crate) fn mentions_port_in_use(log: &str) -> bool {
    let log = log.to_lowercase();
    ["address already in use", "address in use", "eaddrinuse"]
        .iter()
        .any(|needle| log.contains(needle))
}

/// The last 64 KiB of the file at `path` (server logs can grow large),
/// as text.
pub(crate) fn read_end(path: &Path) -> io::Result<String> {
    const MAX_BYTES: u64 = 64 * 1024;
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(MAX_BYTES)))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The last `n` lines of the file at `path`, from its last 64 KiB.
pub(crate) fn read_tail(path: &Path, n: usize) -> io::Result<String> {
    Ok(last_lines(&read_end(path)?, n))
}

/// The last `n` lines of `text`.
pub(crate) fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The last 10 lines of a server log's `text` that report a failure (see
/// [`reports_failure`]).
pub(crate) fn failure_lines(text: &str) -> String {
    const MAX_LINES: usize = 10;
    let lines: Vec<&str> = text.lines().filter(|l| reports_failure(l)).collect();
    lines[lines.len().saturating_sub(MAX_LINES)..].join("\n")
}

/// Whether a server log line reports why the server failed: a Go panic
/// (etcd), a zap log entry at error level or worse, a Java exception or
/// error (ZooKeeper), or a Redis warning.
fn reports_failure(line: &str) -> bool {
    const NEEDLES: &[&str] = &[
        "panic:",
        "\"level\":\"error\"",
        "\"level\":\"panic\"",
        "\"level\":\"fatal\"",
        "Exception",
        "ERROR",
        "FATAL",
        "# ",
        "no space left",
    ];
    NEEDLES.iter().any(|needle| line.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(crate) fn failure_lines_of_each_server_are_recognised() {
        let etcd_panic = "panic: create wal error: no space left on device";
        let zap_panic = r#"{"level":"panic","msg":"failed to create WAL"}"#;
        let zookeeper = "java.io.IOException: No space left on device";
        let redis = "123:M 22 Nov 2026 10:00:00.000 # Failed opening the temp RDB file";
        for line in [etcd_panic, zap_panic, zookeeper, redis] {
            assert!(reports_failure(line), "{line}");
        }
        let goroutine = "\tgo.etcd.io/etcd/etcdserver/raft.go:513 +0x24d";
        assert!(!reports_failure(goroutine));
    }
}
