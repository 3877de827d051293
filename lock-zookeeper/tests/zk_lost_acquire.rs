//! An acquisition whose reply never came: the server frozen, the caller
//! giving up on it (its call dropped after a second, well before the
//! client library would declare the connection lost), then the server
//! resumed while the connection and session still live, so it applies the
//! create after the caller gave up. The node would hold the lock for the
//! session's whole life (as long as the locker lives): it must be deleted,
//! and the key free within seconds.
//!
//! (When the client library gives up first, it closes the connection, and
//! ZooKeeper drops the requests of a closed connection: nothing is
//! applied late. The caller's own deadline is the case that matters.)

mod common;

use std::time::Duration;

use common::connect;
use distlock_testkit::probe::tcp_answer;
use distlock_testkit::zookeeper::{standalone_spec, zk_url};
use distlock_testkit::{eventually, Server};

/// The server's last zxid, from `srvr`.
async fn zxid(server: &Server) -> u64 {
    let answer = tcp_answer(server.addr(), b"srvr").await.unwrap();
    let hex = answer
        .lines()
        .find_map(|line| line.strip_prefix("Zxid: 0x"))
        .expect("srvr shows the zxid");
    u64::from_str_radix(hex.trim(), 16).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_was_lost_leaves_no_orphan_node() {
    let server = standalone_spec().unwrap().start().await.unwrap();
    // A 10 s session: the client library would give up on the frozen
    // server after 4 s; the caller gives up after 1 s.
    let url = zk_url(&[server.addr()], "/lost", "ttl=10s&connect_timeout=1s");
    let (a, b) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
    // Sessions open and the lock's directory made before the freeze.
    a.try_lock("k")
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    assert!(b.inspect("k").await.unwrap().is_none());
    let before = zxid(&server).await;

    server.pause().await.unwrap();
    let attempt = tokio::time::timeout(Duration::from_secs(1), a.try_lock("k")).await;
    assert!(attempt.is_err(), "answered by a frozen server: {attempt:?}");
    server.resume().unwrap();
    // The server now applies the create it had buffered, and the
    // abandoned call's clean-up deletes the node: two writes.
    eventually(
        Duration::from_secs(10),
        "the late create and its clean-up",
        || {
            let server = &server;
            async move {
                let now = zxid(server).await;
                if now >= before + 2 {
                    Ok(())
                } else {
                    Err(format!("zxid {now}, {before} before the freeze"))
                }
            }
        },
    )
    .await
    .unwrap();

    // Nothing of it stays: the key is free at once.
    let guard = b.try_lock("k").await.unwrap();
    assert!(guard.is_some(), "an orphan node holds the lock");
    guard.unwrap().release().await.unwrap();
}
