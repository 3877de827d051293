//! Acquisitions whose reply never came, on Redlock's five independent
//! masters of this binary's own (see
//! `distlock_testkit::scenarios::lost_reply`).
//!
//! What "the reply was lost" means here: the outcome of a Redlock
//! acquisition is unknown to its caller only when no majority of masters
//! answered. With a minority silent (one master frozen, say), the others'
//! answers decide it — a majority granted, or too many refused — and what
//! the silent masters apply late is the decided holder's own hold
//! (released with it) or undone with the round; that is not this case. So
//! a majority of the masters (and, in the second case, all of them) is
//! frozen past the response timeout while the round is in flight: the
//! round fails, undoes at once what the live masters granted, and sends
//! the same owner-checked undo to the frozen ones, behind the acquire they
//! apply once resumed. Nothing may stay on any master (an orphan there
//! would keep a majority out for its 30 s lease), checked on each master
//! with a raw connection, and another client takes the lock at once.
//!
//! Redlock has no line of waiters, read locks or semaphores (its
//! capabilities declare neither `fifo`, `shared_locks` nor `semaphores`):
//! those cases are marked not applicable below, with the reason.
//!
//! The cases take turns on the masters ([`TURN`]): each freezes them.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::connect;
use distlock_testkit::redis::{redlock_url, start_masters, TEST_TIMEOUTS};
use distlock_testkit::scenarios::lost_reply::redis::RedisRecords;
use distlock_testkit::scenarios::lost_reply::{
    lost_reply, Acquisition, GiveUp, LostReply, Together,
};
use distlock_testkit::{Pausable, Server};
use tokio::sync::{Mutex, OnceCell};

/// One case at a time on the masters: each freezes them.
static TURN: Mutex<()> = Mutex::const_new(());

/// This binary's masters, started on first use and kept for the process.
async fn masters() -> &'static [Server] {
    static MASTERS: OnceCell<&'static [Server]> = OnceCell::const_new();
    MASTERS
        .get_or_init(|| async {
            let servers = start_masters("redlock-lost-reply", 5).await.unwrap();
            &*Box::leak(servers.into_boxed_slice())
        })
        .await
}

/// Runs the scenario for a plain lock in a namespace of its own, with the
/// first `frozen` masters frozen.
async fn lost(frozen: usize, namespace: &str) {
    let _turn = TURN.lock().await;
    let masters = masters().await;
    let addrs: Vec<SocketAddr> = masters.iter().map(Server::addr).collect();
    let url = format!(
        "{}?ttl=30s&namespace={namespace}&{TEST_TIMEOUTS}",
        redlock_url(addrs.iter().copied())
    );
    let (a, b) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
    let store = RedisRecords::redlock(&addrs, &b).await.unwrap();
    let frozen = Together(
        masters[..frozen]
            .iter()
            .map(|m| m as &dyn Pausable)
            .collect(),
    );
    let plan = LostReply {
        acquisition: Acquisition::Lock,
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

/// Three of five masters frozen: the round's outcome is unknown, and
/// nothing of it stays on any master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_whose_reply_was_lost_on_a_majority_leaves_no_orphan_lock() {
    lost(3, "lost-majority").await;
}

/// Every master frozen: the same, with no master answering at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_whose_reply_was_lost_on_every_master_leaves_no_orphan_lock() {
    lost(5, "lost-all").await;
}

/// Not applicable: Redlock keeps no line of waiters on its masters (no
/// `fifo` capability). A waiting acquisition is a series of the rounds
/// the plain-lock cases above lose; none of them queues anything.
#[tokio::test]
#[ignore = "not applicable: Redlock keeps no line of waiters (no `fifo`); a wait is a series of plain rounds, covered above"]
async fn a_queued_request_whose_reply_was_lost() {
    panic!("Redlock has no queued waiters: nothing to lose the reply of");
}

/// Not applicable: Redlock has no read locks (`shared_locks`).
#[tokio::test]
#[ignore = "not applicable: Redlock has no read locks (`rwlock` is NotSupported)"]
async fn a_read_lock_whose_reply_was_lost() {
    panic!("Redlock has no read locks");
}

/// Not applicable: Redlock has no semaphores (`semaphores`).
#[tokio::test]
#[ignore = "not applicable: Redlock has no semaphores (`semaphore` is NotSupported)"]
async fn a_permit_whose_reply_was_lost() {
    panic!("Redlock has no semaphores");
}
