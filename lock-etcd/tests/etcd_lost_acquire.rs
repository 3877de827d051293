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

/// Freezes the member, lets `a`'s attempt on `key` time out, resumes the
/// member and waits (bounded) until a transaction sent meanwhile has been
/// handled. `false` when none reached the member: the client library may
/// cancel the request before its bytes leave, and the member drops a
/// request cancelled before it starts.
async fn a_late_attempt(
    server: &distlock_testkit::Server,
    a: &lock_core::Locker,
    key: &str,
) -> bool {
    let (started_before, _) = txns(server.addr()).await;
    server.pause().await.unwrap();
    let attempt = a.try_lock(key).await;
    assert!(
        matches!(attempt, Err(LockError::Unavailable { .. })),
        "{attempt:?}"
    );
    server.resume().unwrap();
    let handled = eventually(
        Duration::from_secs(3),
        "the late request handled",
        || async {
            // Each answer bounded: a metrics request may go unanswered right
            // after the member resumes.
            let asked = tokio::time::timeout(Duration::from_millis(500), txns(server.addr()));
            match asked.await {
                Ok((started, handled)) if started > started_before && handled == started => Ok(()),
                Ok((started, handled)) => Err(format!("{started} started, {handled} handled")),
                Err(_) => Err("the metrics did not answer".to_owned()),
            }
        },
    );
    handled.await.is_ok()
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
    // Until one attempt's request reaches the member after the caller
    // gave up on it (most do); never passing without one.
    let mut late = None;
    for i in 0..12 {
        let key = format!("k{i}");
        if a_late_attempt(&server, &a, &key).await {
            late = Some(key);
            break;
        }
    }
    let key = late.expect("no attempt reached the member after its caller gave up");

    // Nothing of it stays: the abandoned call's clean-up deletes the entry
    // (a second time a moment later if its first delete ran before the
    // late put), so the queue empties within seconds and the key is free.
    let queue = distlock_testkit::layout::etcd_queue_prefix(&b.name(&key).unwrap());
    let entries = || async {
        raw.kv_client()
            .get(
                queue.clone(),
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_count_only(),
                ),
            )
            .await
            .unwrap()
            .count()
    };
    eventually(Duration::from_secs(5), "the late entry deleted", || async {
        match entries().await {
            0 => Ok(()),
            n => Err(format!("{n} entries in the queue")),
        }
    })
    .await
    .unwrap();
    let guard = b.try_lock(&key).await.unwrap().expect("the lock is free");
    assert_eq!(entries().await, 1, "entries besides the new holder's");
    guard.release().await.unwrap();
}
