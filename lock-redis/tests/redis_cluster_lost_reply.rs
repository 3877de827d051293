//! Acquisitions whose reply never came, on a Redis Cluster of three
//! masters of this binary's own (see
//! `distlock_testkit::scenarios::lost_reply`): every master frozen (the
//! one owning the key's slot among them; a cluster client cannot go
//! through a fault proxy, so the servers themselves are frozen) past the
//! response timeout, then resumed, so the key's master runs the acquire
//! script after the caller gave up. For a plain lock, a read lock, a
//! permit and a waiter queued behind a holder, nothing may stay: the
//! abandoned call's clean-up runs right behind it, and another client
//! takes the key at once. The bound on what may be left is one second, as
//! on one server (`tests/redis_lost_reply.rs` says why); the freezes are
//! far shorter than the 5 s node timeout, so no master is failed.
//!
//! The cases take turns on the cluster ([`TURN`]): each freezes it.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::connect;
use distlock_testkit::redis::{cluster_url, start_cluster, TEST_TIMEOUTS};
use distlock_testkit::scenarios::lost_reply::redis::RedisRecords;
use distlock_testkit::scenarios::lost_reply::{
    lost_reply, Acquisition, GiveUp, LostReply, Together,
};
use distlock_testkit::{Pausable, Server};
use tokio::sync::{Mutex, OnceCell};

/// One case at a time on the cluster: each freezes it.
static TURN: Mutex<()> = Mutex::const_new(());

/// This binary's cluster, started on first use and kept for the process.
async fn masters() -> &'static [Server] {
    static MASTERS: OnceCell<&'static [Server]> = OnceCell::const_new();
    MASTERS
        .get_or_init(|| async {
            let servers = start_cluster(3).await.unwrap();
            &*Box::leak(servers.into_boxed_slice())
        })
        .await
}

/// Runs the scenario for `acquisition` in a namespace of its own.
async fn lost(acquisition: Acquisition, namespace: &str) {
    let _turn = TURN.lock().await;
    let masters = masters().await;
    let addrs: Vec<SocketAddr> = masters.iter().map(Server::addr).collect();
    let url = format!(
        "{}?ttl=30s&namespace={namespace}&{TEST_TIMEOUTS}",
        cluster_url(addrs.iter().copied())
    );
    let (a, b) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
    let store = RedisRecords::cluster(&addrs, &b).await.unwrap();
    let frozen = Together(masters.iter().map(|m| m as &dyn Pausable).collect());
    let plan = LostReply {
        acquisition,
        server: &frozen,
        give_up: GiveUp::ResponseTimeout,
        freeze_after: None,
        warm_key: "warm",
        keys: &["k"],
        reach_within: Duration::from_secs(9),
        clean_within: Some(Duration::from_secs(1)),
    };
    lost_reply(&plan, &store, &a, &b).await;
}

/// A late `try_lock` leaves no orphan lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_whose_reply_was_lost_leaves_no_orphan_lock() {
    lost(Acquisition::Lock, "lost-lock").await;
}

/// A late request that queues behind a holder leaves no phantom waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_request_whose_reply_was_lost_leaves_no_phantom_waiter() {
    lost(Acquisition::QueuedLock, "lost-queued").await;
}

/// A late `try_read` leaves no orphan reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_lock_whose_reply_was_lost_leaves_no_orphan_reader() {
    lost(Acquisition::Read, "lost-read").await;
}

/// A late `try_acquire` leaves no orphan permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_whose_reply_was_lost_leaves_no_orphan_permit() {
    lost(Acquisition::Permit, "lost-permit").await;
}
