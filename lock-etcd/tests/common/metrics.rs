//! Reading a test server's etcd metrics.

use distlock_testkit::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The value of the metric whose line starts with `name` (labels included)
/// in the server's `GET /metrics`.
pub(crate) async fn metric(server: &Server, name: &str) -> u64 {
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map(|value| value as u64)
        .unwrap_or_else(|| panic!("{name} in /metrics"))
}
