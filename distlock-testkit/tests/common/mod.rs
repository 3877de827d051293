//! What the testkit's own tests share: a python interpreter to run small
//! servers with, echo round trips, and checking a message.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use distlock_testkit::find_program;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Generous bound for things that should be quick, on a busy 2-core box.
pub(crate) const QUICK: Duration = Duration::from_secs(5);
/// How long a stalled read is given before we call it stalled.
pub(crate) const STALL: Duration = Duration::from_millis(300);

/// The real python interpreter (not a pyenv shim script), so the
/// spawned process is python itself.
pub(crate) fn python() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let shim = find_program(&["python3"], "install python3").unwrap();
            let out = Command::new(shim)
                .args(["-c", "import sys; print(sys.executable)"])
                .output()
                .expect("run python3");
            PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
        })
        .clone()
}

/// Sends `msg` on `stream` and reads the same number of bytes back.
pub(crate) async fn exchange(stream: &mut TcpStream, msg: &[u8]) -> io::Result<Vec<u8>> {
    stream.write_all(msg).await?;
    let mut buf = vec![0u8; msg.len()];
    stream.read_exact(&mut buf).await?;
    Ok(buf)
}

/// Connects to `addr` and echoes `msg` once, within [`QUICK`].
pub(crate) async fn round_trip(addr: SocketAddr, msg: &[u8]) -> io::Result<Vec<u8>> {
    let attempt = async {
        let mut stream = TcpStream::connect(addr).await?;
        exchange(&mut stream, msg).await
    };
    timeout(QUICK, attempt).await?
}

/// The next `len` bytes of `stream`, within [`QUICK`].
pub(crate) async fn read_within_quick(stream: &mut TcpStream, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    timeout(QUICK, stream.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    buf
}

/// Asserts that `text` contains each of `parts`, naming the missing one.
pub(crate) fn assert_mentions(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "{part:?} missing in: {text}");
    }
}
