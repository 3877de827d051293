//! Readiness probes: small async checks that a server answers.
//!
//! Use them in [`crate::ServerSpec::probe`], e.g. for Redis:
//! `.probe(|ctx| Box::pin(tcp_request(ctx.addr(), b"PING\r\n", "+PONG")))`.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The future a readiness probe returns: `Ok` once the server is ready,
/// `Err` with a reason (shown if the server never gets ready) otherwise.
pub type ProbeFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// Ready when a TCP connection to `addr` succeeds. The default probe.
pub async fn tcp_connect(addr: SocketAddr) -> Result<(), String> {
    TcpStream::connect(addr)
        .await
        .map(drop)
        .map_err(|e| format!("connect to {addr}: {e}"))
}

/// Ready when the server at `addr`, sent `request`, answers with bytes
/// containing `expect` before closing the connection.
///
/// Covers line protocols: Redis (`PING\r\n` → `+PONG`), ZooKeeper
/// four-letter words (`ruok` → `imok`, if whitelisted) and plain HTTP/1.0
/// (`GET /health HTTP/1.0\r\n\r\n` → `"health":"true"`). The caller bounds
/// the time; the server's readiness timeout does so for probes.
pub async fn tcp_request(addr: SocketAddr, request: &[u8], expect: &str) -> Result<(), String> {
    let mut stream = send(addr, request).await?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if String::from_utf8_lossy(&answer).contains(expect) {
            return Ok(());
        }
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("read from {addr}: {e}"))?;
        if n == 0 {
            let answer = String::from_utf8_lossy(&answer);
            return Err(format!("{addr} answered {answer:?}, expected {expect:?}"));
        }
        answer.extend_from_slice(&chunk[..n]);
    }
}

/// The whole answer of the server at `addr` to `request`, read until it
/// closes the connection (e.g. a ZooKeeper four-letter word).
pub async fn tcp_answer(addr: SocketAddr, request: &[u8]) -> Result<String, String> {
    let mut answer = String::new();
    send(addr, request)
        .await?
        .read_to_string(&mut answer)
        .await
        .map_err(|e| format!("read from {addr}: {e}"))?;
    Ok(answer)
}

/// A connection to `addr` on which `request` was sent.
async fn send(addr: SocketAddr, request: &[u8]) -> Result<TcpStream, String> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    stream
        .write_all(request)
        .await
        .map_err(|e| format!("send to {addr}: {e}"))?;
    Ok(stream)
}
