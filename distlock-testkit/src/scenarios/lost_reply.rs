//! The lost-reply scenario: an acquisition whose request reached the
//! store but whose answer never came back to the caller leaves nothing
//! behind, and the key can be taken afterwards.
//!
//! The reply is lost by freezing the store's server (`SIGSTOP`) while the
//! request is in flight: the caller gives up on it, then the server is
//! resumed and applies the request it had buffered after its caller is
//! gone. What differs per store — how the caller gives up, which counter
//! proves the late request was applied, what the store keeps of a lock —
//! comes in a [`LostReply`] plan and a [`LostReplyStore`].

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use lock_core::{LockError, Locker};

use crate::{eventually, Pausable};

/// How the caller gives up on the acquisition sent to the frozen server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiveUp {
    /// The locker's own response timeout: the attempt must fail with
    /// [`LockError::Unavailable`].
    ResponseTimeout,
    /// The caller's deadline: the call is dropped after this long, and the
    /// locker must not have answered by then.
    Deadline(Duration),
}

/// What the scenario reads from one store, from outside distlock.
pub trait LostReplyStore {
    /// A reading of a store-wide counter that moves on when the store
    /// applies a request (a token counter, a transaction count, a zxid).
    type Mark: Debug;

    /// Reads the counter now.
    fn mark(&self) -> impl Future<Output = Self::Mark>;

    /// `Ok` once the counter shows that the store applied (and, where the
    /// store shows it, finished handling) a request sent after `before`
    /// was read; `Err` saying what it shows otherwise.
    fn reached(&self, before: &Self::Mark) -> impl Future<Output = Result<(), String>>;

    /// How many records (keys, queue entries, nodes) the store keeps for
    /// lock `key`, as `Locker::name` names it in the lockers' namespace.
    fn kept(&self, key: &str) -> impl Future<Output = usize>;
}

/// The store-specific set-up of one run of [`lost_reply`].
#[derive(Debug)]
pub struct LostReply<'a> {
    /// The server to freeze: the lockers must talk to it alone.
    pub server: &'a dyn Pausable,
    /// How the caller gives up on the frozen server.
    pub give_up: GiveUp,
    /// The key the first locker takes and releases before the freeze, so
    /// that connections, sessions and directories exist by then.
    pub warm_key: &'a str,
    /// The keys to try in turn until one attempt's request reaches the
    /// store after its caller gave up (a client library may cancel a
    /// request before its bytes leave); one key where every attempt must.
    pub keys: &'a [&'a str],
    /// How long the store may take, once resumed, to show the late
    /// request applied.
    pub reach_within: Duration,
    /// How long the store may then keep records of the key: `None` when
    /// nothing may be left by the time the request shows as applied.
    pub clean_within: Option<Duration>,
}

/// What [`lost_reply`] saw, for a store's own further checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostReplySeen {
    /// The key whose acquisition lost its reply.
    pub key: String,
    /// The fencing token of the warm-up lock.
    pub warm_token: u64,
    /// The fencing token the second locker got on the key afterwards.
    pub taken_token: u64,
}

/// Runs the scenario: `a` warms up, then loses the reply of an attempt on
/// a key of `plan.keys` whose request reaches the store (`store`'s counter
/// proves it); the store then keeps no record of the key (within
/// `plan.clean_within`), `b` takes it at once with a token above the
/// warm-up's, and the store keeps one record, the new holder's. Panics
/// naming the step that failed.
pub async fn lost_reply<S: LostReplyStore>(
    plan: &LostReply<'_>,
    store: &S,
    a: &Locker,
    b: &Locker,
) -> LostReplySeen {
    let warm = a
        .try_lock(plan.warm_key)
        .await
        .unwrap()
        .expect("a warms up");
    let warm_token = warm.token().get();
    warm.release().await.unwrap();
    let mut late = Err("no key to try".to_owned());
    for key in plan.keys {
        assert!(b.inspect(key).await.unwrap().is_none(), "{key} is held");
        let before = store.mark().await;
        lose_the_reply(plan, a, key).await;
        let reached = eventually(plan.reach_within, "the late request applied", || {
            store.reached(&before)
        });
        late = reached.await.map(|()| *key);
        if late.is_ok() {
            break;
        }
    }
    let key = late.unwrap_or_else(|last| {
        panic!("no attempt reached the store after its caller gave up: {last}")
    });
    nothing_kept(plan, store, key).await;
    let guard = b.try_lock(key).await.unwrap().expect("the lock is free");
    assert_eq!(store.kept(key).await, 1, "records besides the new holder's");
    let taken_token = guard.token().get();
    assert!(
        taken_token > warm_token,
        "b's token {taken_token} is not above the warm-up's {warm_token}"
    );
    guard.release().await.unwrap();
    LostReplySeen {
        key: key.to_owned(),
        warm_token,
        taken_token,
    }
}

/// Freezes the server, lets `a`'s attempt on `key` be given up on as
/// `plan.give_up` says, and resumes the server.
async fn lose_the_reply(plan: &LostReply<'_>, a: &Locker, key: &str) {
    plan.server.pause().await.unwrap();
    match plan.give_up {
        GiveUp::ResponseTimeout => {
            let attempt = a.try_lock(key).await;
            assert!(
                matches!(attempt, Err(LockError::Unavailable { .. })),
                "{attempt:?}"
            );
        }
        GiveUp::Deadline(after) => {
            let attempt = tokio::time::timeout(after, a.try_lock(key)).await;
            assert!(attempt.is_err(), "answered by a frozen server: {attempt:?}");
        }
    }
    plan.server.resume().unwrap();
}

/// Checks that the store keeps no record of `key`: at once, or within
/// `plan.clean_within`.
async fn nothing_kept<S: LostReplyStore>(plan: &LostReply<'_>, store: &S, key: &str) {
    let Some(within) = plan.clean_within else {
        assert_eq!(store.kept(key).await, 0, "an orphan record of {key}");
        return;
    };
    eventually(within, "the late record deleted", || async {
        match store.kept(key).await {
            0 => Ok(()),
            n => Err(format!("records of {key} left: {n}")),
        }
    })
    .await
    .unwrap();
}
