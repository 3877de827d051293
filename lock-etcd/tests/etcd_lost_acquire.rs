//! An acquisition whose reply never came: the member frozen past the
//! response timeout, then resumed, so it applies the request after the
//! caller gave up. No entry may stay behind on the session's lease (which
//! lives as long as the locker): the key is free within seconds.

mod common;

use std::time::Duration;

use common::connect;
use distlock_testkit::etcd::{keys_under, raw_client};
use distlock_testkit::layout::etcd_queue_prefix;
use distlock_testkit::scenarios::lost_reply::{lost_reply, GiveUp, LostReply, LostReplyStore};
use lock_core::Locker;
use servers::{single_member, url_for};

#[path = "common/servers.rs"]
mod servers;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_was_lost_leaves_no_orphan_entry() {
    let server = single_member("etcd-lost-acquire").await;
    let url = url_for([server.addr()], "30s", "lost-acquire");
    let (a, b) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
    let store = EtcdRecords {
        member: server.addr(),
        raw: raw_client(&url).await.unwrap(),
        locker: b.clone(),
    };
    // Until one attempt's request reaches the member after the caller
    // gave up on it (most do); never passing without one. Nothing of it
    // stays: the abandoned call's clean-up deletes the entry (a second
    // time a moment later if its first delete ran before the late put),
    // so the queue empties within seconds and the key is free.
    let keys: Vec<String> = (0..12).map(|i| format!("k{i}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let plan = LostReply {
        server: &server,
        give_up: GiveUp::ResponseTimeout,
        warm_key: "warm",
        keys: &keys,
        reach_within: Duration::from_secs(3),
        clean_within: Some(Duration::from_secs(5)),
    };
    lost_reply(&plan, &store, &a, &b).await;
}

/// One member's transaction counts and a lock's queue, read from outside
/// distlock.
struct EtcdRecords {
    member: std::net::SocketAddr,
    raw: etcd_client::Client,
    locker: Locker,
}

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

impl LostReplyStore for EtcdRecords {
    /// Transactions started.
    type Mark = u64;

    async fn mark(&self) -> u64 {
        txns(self.member).await.0
    }

    /// A transaction started after `before` and every one handled: the
    /// member dropped no request cancelled before it started.
    async fn reached(&self, before: &u64) -> Result<(), String> {
        // Each answer bounded: a metrics request may go unanswered right
        // after the member resumes.
        let asked = tokio::time::timeout(Duration::from_millis(500), txns(self.member));
        match asked.await {
            Ok((started, handled)) if started > *before && handled == started => Ok(()),
            Ok((started, handled)) => Err(format!("{started} started, {handled} handled")),
            Err(_) => Err("the metrics did not answer".to_owned()),
        }
    }

    /// The entries in the key's queue.
    async fn kept(&self, key: &str) -> usize {
        let queue = etcd_queue_prefix(&self.locker.name(key).unwrap());
        let entries = keys_under(&self.raw, &queue).await.unwrap();
        usize::try_from(entries).unwrap()
    }
}
