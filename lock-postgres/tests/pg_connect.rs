//! Connection failures explained: a port where nothing listens, and a
//! port where another kind of server answers, are named as such with
//! what to try; no password shows.

use std::time::Duration;

use distlock_testkit::free_port;
use lock_core::open::open_store;
use lock_core::LockError;
use lock_postgres::PgStore;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// The error opening the store on `port` of loopback gives.
async fn refusal(port: u16) -> LockError {
    let url = format!("postgres://app:s3cret@127.0.0.1:{port}/app?connect_timeout=2s");
    let opened = tokio::time::timeout(Duration::from_secs(20), open_store::<PgStore>(&url))
        .await
        .expect("the failure took too long");
    let error = opened.expect_err("opened a store where there is no server");
    assert!(!error.to_string().contains("s3cret"), "{error}");
    error
}

#[tokio::test]
async fn nothing_listening_is_named_with_what_to_try() {
    let error = refusal(free_port().unwrap()).await;
    assert!(matches!(error, LockError::Unavailable { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("cannot connect to PostgreSQL at 127.0.0.1:"),
        "{message}"
    );
    assert!(message.contains("connection refused"), "{message}");
}

#[tokio::test]
async fn another_kind_of_server_is_named() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // An HTTP server: answers anything with a 400.
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let _ = socket
                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                .await;
        }
    });
    let message = refusal(port).await.to_string();
    assert!(
        message.contains("the server there is not PostgreSQL"),
        "{message}"
    );
}
