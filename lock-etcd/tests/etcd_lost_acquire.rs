//! Acquisitions whose reply never came (see
//! `distlock_testkit::scenarios::lost_reply`), on one member of this
//! binary's own: the member frozen past the response timeout, then
//! resumed, so it applies the request after the caller gave up. For a
//! plain lock, a read lock, a permit and a waiter queued behind a holder,
//! no entry may stay behind on the session's lease (which lives as long
//! as the locker, so an orphan would block the key for good): the
//! abandoned call's clean-up deletes the entry (a second time a moment
//! later if its first delete ran before the late put), so the queue
//! holds nothing of it within seconds and the key is free.
//!
//! The caller's locker talks to the member through a fault proxy that
//! delays every packet by [`LATENCY`] each way, as a network does: the
//! client library cancels the request it gave up on, and without the
//! delay the member, resumed, would find the request and its cancellation
//! side by side and mostly drop the request unhandled (then nothing was
//! applied late, and the case would have to try key after key). With it,
//! the member handles the request before the cancellation arrives.
//!
//! A permit's acquisition first checks the semaphore's limit (and, on an
//! unused semaphore, stores it), each a round trip, before the put that
//! queues its entry: frozen before the attempt, the member would hold
//! only the limit check. So for a permit the member is frozen while the
//! put is on its way, after the limit's two round trips.
//!
//! The cases take turns on the member ([`TURN`]): each freezes it.

mod common;

use std::time::Duration;

use common::connect;
use distlock_testkit::etcd::{keys_under, raw_client};
use distlock_testkit::layout::etcd_queue_prefix;
use distlock_testkit::scenarios::lost_reply::{
    lost_reply, Acquisition, GiveUp, LostReply, LostReplyStore,
};
use distlock_testkit::{FaultProxy, Server};
use lock_core::Locker;
use servers::{single_member, url_for};
use tokio::sync::{Mutex, OnceCell};

#[path = "common/servers.rs"]
mod servers;

/// One case at a time on the member: each freezes it.
static TURN: Mutex<()> = Mutex::const_new(());

/// The delay each way on the caller's link.
const LATENCY: Duration = Duration::from_millis(150);

/// This binary's member, started on first use and kept for the process.
async fn member() -> &'static Server {
    static MEMBER: OnceCell<&'static Server> = OnceCell::const_new();
    MEMBER
        .get_or_init(|| async { &*Box::leak(Box::new(single_member("etcd-lost-reply").await)) })
        .await
}

/// Runs the scenario for `acquisition` in a namespace of its own.
async fn lost(acquisition: Acquisition, namespace: &str) {
    let _turn = TURN.lock().await;
    let server = member().await;
    let url = url_for([server.addr()], "30s", namespace);
    // The caller talks through the slow link (see the module docs),
    // slowed down once it is connected.
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let a = connect(&url_for([proxy.addr()], "30s", namespace))
        .await
        .unwrap();
    proxy.set_latency(LATENCY);
    let (freeze_after, writes_before_entry) = match acquisition {
        // The limit's read and its write have been answered (after four
        // delays), the put queueing the entry is on its way (it arrives
        // after five).
        Acquisition::Permit => (Some(LATENCY * 4), 1),
        _ => (None, 0),
    };
    let b = connect(&url).await.unwrap();
    let store = EtcdRecords {
        raw: raw_client(&url).await.unwrap(),
        locker: b.clone(),
        writes_before_entry,
    };
    // Until one attempt's request reaches the member after the caller
    // gave up on it (the first does); never passing without one.
    let keys: Vec<String> = (0..3).map(|i| format!("k{i}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let plan = LostReply {
        acquisition,
        server,
        give_up: GiveUp::ResponseTimeout,
        freeze_after,
        warm_key: "warm",
        keys: &keys,
        reach_within: Duration::from_secs(3),
        clean_within: Some(Duration::from_secs(5)),
    };
    lost_reply(&plan, &store, &a, &b).await;
}

/// A late `try_lock` leaves no orphan entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_was_lost_leaves_no_orphan_entry() {
    lost(Acquisition::Lock, "lost-acquire").await;
}

/// A late put that queues behind a holder leaves no entry that would
/// head the queue once the holder leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_request_whose_reply_was_lost_leaves_no_phantom_waiter() {
    lost(Acquisition::QueuedLock, "lost-queued").await;
}

/// A late `try_read` leaves no reader's entry keeping writers out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_lock_whose_reply_was_lost_leaves_no_orphan_reader() {
    lost(Acquisition::Read, "lost-read").await;
}

/// A late `try_acquire` leaves no permit entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_whose_reply_was_lost_leaves_no_orphan_permit() {
    lost(Acquisition::Permit, "lost-permit").await;
}

/// The member's revision and a name's queues, read from outside
/// distlock.
struct EtcdRecords {
    raw: etcd_client::Client,
    locker: Locker,
    /// The writes an attempt makes before the put of its entry (a
    /// permit's first use stores the semaphore's limit).
    writes_before_entry: i64,
}

impl EtcdRecords {
    /// The store's revision: every write moves it on.
    async fn revision(&self) -> Result<i64, String> {
        let mut kv = self.raw.kv_client();
        let read = kv.get("distlock", None);
        let response = tokio::time::timeout(Duration::from_millis(500), read)
            .await
            .map_err(|_| "the member did not answer".to_owned())?
            .map_err(|e| e.to_string())?;
        Ok(response.header().map_or(0, |h| h.revision()))
    }
}

impl LostReplyStore for EtcdRecords {
    /// The revision.
    type Mark = i64;

    async fn mark(&self) -> i64 {
        self.revision().await.unwrap()
    }

    /// The put of the entry applied since `before` (after the writes the
    /// attempt makes before it); the clean-up's delete comes after it.
    async fn reached(&self, before: &i64) -> Result<(), String> {
        let now = self.revision().await?;
        match now > before + self.writes_before_entry {
            true => Ok(()),
            false => Err(format!("revision {now}, {before} before the attempt")),
        }
    }

    /// The entries in the queue of the name's lock and of its semaphore.
    async fn kept(&self, key: &str) -> usize {
        let queue = etcd_queue_prefix(&self.locker.name(key).unwrap());
        let permits = format!("{}%permits/", queue.trim_end_matches('/'));
        let mut entries = 0;
        for prefix in [queue, permits] {
            entries += keys_under(&self.raw, &prefix).await.unwrap();
        }
        usize::try_from(entries).unwrap()
    }
}
