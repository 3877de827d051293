//! Acquisitions whose reply never came, on the master of a Redis Sentinel
//! group of this binary's own (see
//! `distlock_testkit::scenarios::lost_reply`): the master frozen (a
//! Sentinel client cannot go through a fault proxy, so the server itself
//! is frozen) while the caller's deadline runs out, then resumed, so it
//! runs the acquire script after the caller gave up. For a plain lock, a
//! read lock, a permit and a waiter queued behind a holder, nothing may
//! stay: the abandoned call's clean-up runs right behind it, and another
//! client takes the key at once. The bound on what may be left is one
//! second, as on one server (`tests/redis_lost_reply.rs` says why).
//!
//! The caller gives up after 300 ms, before the locker's own 500 ms
//! response timeout: the master is frozen well under the sentinels' 1 s
//! down-after, so they fail nothing over (checked after each case: a
//! failover would turn the old master into a replica and lose what the
//! case looks at).
//!
//! The cases take turns on the group ([`TURN`]): each freezes its master.

mod common;

use std::time::Duration;

use common::connect;
use distlock_testkit::redis::TEST_TIMEOUTS;
use distlock_testkit::redis_sentinel::SentinelGroup;
use distlock_testkit::scenarios::lost_reply::redis::RedisRecords;
use distlock_testkit::scenarios::lost_reply::{lost_reply, Acquisition, GiveUp, LostReply};
use distlock_testkit::with_query;
use tokio::sync::{Mutex, OnceCell};

/// One case at a time on the group: each freezes its master.
static TURN: Mutex<()> = Mutex::const_new(());

/// This binary's group, started on first use and kept for the process.
async fn group() -> &'static SentinelGroup {
    static GROUP: OnceCell<&'static SentinelGroup> = OnceCell::const_new();
    GROUP
        .get_or_init(|| async {
            let group = SentinelGroup::start("sentinel-lost-reply").await.unwrap();
            &*Box::leak(Box::new(group))
        })
        .await
}

/// Runs the scenario for `acquisition` in a namespace of its own.
async fn lost(acquisition: Acquisition, namespace: &str) {
    let _turn = TURN.lock().await;
    let group = group().await;
    let master = group.master.addr();
    assert_eq!(group.master_addr().await.unwrap(), master, "failed over");
    let query = format!("ttl=30s&namespace={namespace}&{TEST_TIMEOUTS}");
    let url = with_query(&group.url(), &query);
    let (a, b) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
    let store = RedisRecords::server(master, &b).await.unwrap();
    let plan = LostReply {
        acquisition,
        server: &group.master,
        give_up: GiveUp::Deadline(Duration::from_millis(300)),
        freeze_after: None,
        warm_key: "warm",
        keys: &["k"],
        reach_within: Duration::from_secs(9),
        clean_within: Some(Duration::from_secs(1)),
    };
    lost_reply(&plan, &store, &a, &b).await;
    assert_eq!(
        group.master_addr().await.unwrap(),
        master,
        "the freeze made the sentinels fail over: nothing was shown"
    );
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
