//! An acquisition whose reply never came: the member frozen past the
//! response timeout, then resumed, so it applies the request after the
//! caller gave up. No entry may stay behind on the session's lease (which
//! lives as long as the locker): the key is free within seconds.

mod common;

use std::time::Duration;

use common::connect;
use distlock_testkit::etcd::raw_client;
use distlock_testkit::eventually;
use lock_core::LockError;
use servers::{single_member, url_for};

#[path = "common/servers.rs"]
mod servers;

/// Transactions the member has started and finished handling so far
/// (any outcome, cancelled included), from its metrics.
async fn txns(member: std::net::SocketAddr) -> (u64, u64) {
    let metrics = distlock_testkit::probe::tcp_answer(member, b"GET /metrics HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let count = |prefix: &str| -> u64 {
        metrics
            .lines()
            .filter(|line| line.starts_with(prefix) && line.contains("grpc_method=\"Txn\""))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    (
        count("grpc_server_started_total{"),
        count("grpc_server_handled_total{"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_was_lost_leaves_no_orphan_entry() {
    let server = single_member("etcd-lost-acquire").await;
    let url = url_for([server.addr()], "30s", "lost-acquire");
    let (a, b) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
    let raw = raw_client(&url).await.unwrap();
    // Sessions granted and connections open before the freeze.
    a.try_lock("warm")
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    assert!(b.inspect("k").await.unwrap().is_none());
    let (started_before, _) = txns(server.addr()).await;

    server.pause().await.unwrap();
    let attempt = a.try_lock("k").await;
    assert!(
        matches!(attempt, Err(LockError::Unavailable { .. })),
        "{attempt:?}"
    );
    server.resume().unwrap();
    // The request sent to the frozen member reaches it now and is handled
    // (applied, or dropped as cancelled): wait until it has been.
    eventually(
        Duration::from_secs(10),
        "the late request handled",
        || async {
            let (started, handled) = txns(server.addr()).await;
            if started > started_before && handled == started {
                Ok(())
            } else {
                Err(format!("{started} started, {handled} handled"))
            }
        },
    )
    .await
    .unwrap();

    // Nothing of it stays: the key is free, with no entry in its queue.
    let guard = b.try_lock("k").await.unwrap().expect("the lock is free");
    let queue = distlock_testkit::layout::etcd_queue_prefix(&b.name("k").unwrap());
    let entries = raw
        .kv_client()
        .get(
            queue,
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await
        .unwrap()
        .count();
    assert_eq!(entries, 1, "entries besides the new holder's");
    guard.release().await.unwrap();
}
