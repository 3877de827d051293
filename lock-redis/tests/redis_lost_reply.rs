//! Acquisitions whose reply never came, on one Redis server of this
//! binary's own (see `distlock_testkit::scenarios::lost_reply`): the
//! server frozen past the response timeout, then resumed, so it runs the
//! acquire script after the caller gave up. For a plain lock, a read
//! lock, a permit and a waiter queued behind a holder, nothing may stay:
//! the abandoned call's clean-up (out of the line, then an owner-checked
//! release of what the late script took) runs right behind it on the same
//! connection, and another client takes the key at once.
//!
//! The bound on what may be left is one second: shorter than what each
//! leftover would block others for (an orphan hold its 30 s lease; a
//! phantom waiter its 3 s place in line, after which it lapses — but a
//! release before then hands it the lock for a whole lease).
//!
//! The cases take turns on the one server ([`TURN`]): each freezes it.

mod common;

use std::time::Duration;

use common::{connect, server_url};
use distlock_testkit::redis::redis_spec;
use distlock_testkit::scenarios::lost_reply::redis::RedisRecords;
use distlock_testkit::scenarios::lost_reply::{
    lost_reply, Acquisition, GiveUp, LostReply, LostReplySeen,
};
use distlock_testkit::shared_server;
use tokio::sync::Mutex;

/// One case at a time on the server: each freezes it.
static TURN: Mutex<()> = Mutex::const_new(());

/// Runs the scenario for `acquisition` in a namespace of its own.
async fn lost(acquisition: Acquisition, namespace: &str) -> LostReplySeen {
    let _turn = TURN.lock().await;
    let server = shared_server("redis-lost-reply", || redis_spec("redis-lost-reply"))
        .await
        .unwrap();
    let url = server_url(server.addr(), namespace, Duration::from_secs(30));
    let (a, b) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
    let store = RedisRecords::server(server.addr(), &b).await.unwrap();
    // "warm" draws from the counter "k" shares (the namespace's).
    let plan = LostReply {
        acquisition,
        server,
        give_up: GiveUp::ResponseTimeout,
        freeze_after: None,
        warm_key: "warm",
        keys: &["k"],
        reach_within: Duration::from_secs(9),
        clean_within: Some(Duration::from_secs(1)),
    };
    lost_reply(&plan, &store, &a, &b).await
}

/// A late `try_lock` leaves no orphan lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_whose_reply_was_lost_leaves_no_orphan_lock() {
    let seen = lost(Acquisition::Lock, "lost-lock").await;
    // The lost request took the token after warm's, so it was applied as
    // a grant (then released).
    assert_eq!(
        seen.taken_token,
        seen.warm_token + 2,
        "the lost acquisition was never applied"
    );
}

/// A late request that queues behind a holder leaves no phantom waiter
/// for the holder's release to hand the lock to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_request_whose_reply_was_lost_leaves_no_phantom_waiter() {
    lost(Acquisition::QueuedLock, "lost-queued").await;
}

/// A late `try_read` leaves no orphan reader keeping writers out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_lock_whose_reply_was_lost_leaves_no_orphan_reader() {
    lost(Acquisition::Read, "lost-read").await;
}

/// A late `try_acquire` leaves no orphan permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_whose_reply_was_lost_leaves_no_orphan_permit() {
    lost(Acquisition::Permit, "lost-permit").await;
}
