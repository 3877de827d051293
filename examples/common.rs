//! What the examples share: the store they lock in.
//!
//! Every example locks in the store `DISTLOCK_URL` names, or, without it,
//! in local files under the system's temp directory (`file://`, no server
//! needed), so that two copies of an example started at once meet.

use distlock::{LockError, Locker};

/// The store of `DISTLOCK_URL`, else files in `<temp>/distlock-examples`,
/// with locks in `namespace`.
pub async fn locker(namespace: &str) -> Result<Locker, LockError> {
    let locks = match std::env::var("DISTLOCK_URL") {
        Ok(_) => distlock::from_env().await?,
        Err(_) => {
            let dir = std::env::temp_dir().join("distlock-examples");
            std::fs::create_dir_all(&dir).map_err(|e| {
                LockError::invalid_config(format!("cannot create {}: {e}", dir.display()))
            })?;
            distlock::connect(&format!("file://{}", dir.display())).await?
        }
    };
    locks.with_namespace(namespace)
}

/// Sends one HTTP/1.1 request to `addr` and returns the status code and
/// the body: a few lines of client so that the examples need no HTTP
/// client library.
pub async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {response:?}")))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}
