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
//!
//! # What is lost
//!
//! The plan's [`Acquisition`] says what the lost request asks for, and so
//! what its late execution would leave behind if the store's clean-up of
//! an abandoned acquisition did not remove it:
//!
//! | [`Acquisition`] | the lost call | before it | left behind, unless withdrawn | the next taker it would block |
//! | --- | --- | --- | --- | --- |
//! | `Lock` | `try_lock` | the key free | an orphan lock | a `try_lock` |
//! | `QueuedLock` | `lock_with` (a long wait) | another locker holds the key | a phantom waiter, the first in line: a release hands it the lock (or it heads the queue) | a `try_lock` right after the holder's release |
//! | `Read` | `try_read` of the key's read-write lock | the key free | an orphan reader | a `try_lock` (a writer: readers would share with it) |
//! | `Permit` | `try_acquire` of the key's semaphore, limit [`PERMIT_LIMIT`] | no permit out | an orphan permit | a `try_acquire` of the same semaphore |
//!
//! For the queued case the request whose reply is lost is the one that
//! puts the caller in line behind the holder (the caller asks while the
//! server is frozen); its late execution queues a waiter nobody waits
//! for any more.
//!
//! # The checks
//!
//! Once the store's counter shows the late request applied, the store
//! keeps no record of the key but the queued case's holder (within
//! [`LostReply::clean_within`]: the bound a store documents, which must
//! be shorter than what the leftover would block others for), the next
//! taker gets the key at once, and the store then keeps exactly its
//! record. Records are counted in the store itself, with a raw client
//! ([`LostReplyStore::kept`]), for every primitive of the name.
//!
//! # Servers that are one store together
//!
//! [`Together`] freezes several servers as one: a Redis Cluster's masters
//! (whichever owns the key's slot is among them), or a majority of
//! Redlock's masters. On Redlock a reply is lost for the whole
//! acquisition only when no majority answers: with a minority of masters
//! silent, the others' answers decide (a majority granted, or refused),
//! and what the silent ones apply late is the decided holder's own hold
//! (released with it) or undone with the round. Freezing one master is
//! that case, not this one. With a majority (or all) frozen, the round
//! fails, undoes what the live masters granted at once and sends the same
//! owner-checked undo to the frozen ones, behind the acquire they apply
//! late; [`LostReplyStore::kept`] there counts what the fullest master
//! keeps (a lock is one record on each master).

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use lock_core::{LockError, LockGuard, LockOptions, Locker};

use crate::pausable::PauseFuture;
use crate::{eventually, Pausable};

#[cfg(feature = "redis")]
#[path = "lost_reply_redis.rs"]
pub mod redis;

/// The limit of the semaphore whose permit [`Acquisition::Permit`] loses:
/// one permit, so that an orphan one keeps everybody else out.
pub const PERMIT_LIMIT: u32 = 1;

/// How long [`Acquisition::QueuedLock`]'s call would wait: far longer
/// than the scenario, so the caller gives up only as [`GiveUp`] says.
pub const QUEUED_WAIT: Duration = Duration::from_secs(60);

/// What the acquisition whose reply is lost asks for; see the module
/// docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquisition {
    /// `try_lock` of a free key.
    Lock,
    /// `lock_with` a long wait, of a key another locker holds: the
    /// request that puts the caller in line.
    QueuedLock,
    /// `try_read` of a free read-write lock.
    Read,
    /// `try_acquire` of a semaphore of [`PERMIT_LIMIT`] with no permit
    /// out.
    Permit,
}

impl Acquisition {
    /// Whether a store with `locker`'s capabilities has this primitive:
    /// read locks and semaphores are declared capabilities, and a waiter
    /// queues only where waiters get the lock in order (`fifo`).
    pub fn supported_by(self, locker: &Locker) -> bool {
        let caps = locker.capabilities();
        match self {
            Self::Lock => true,
            Self::QueuedLock => caps.fifo,
            Self::Read => caps.shared_locks,
            Self::Permit => caps.semaphores,
        }
    }

    /// One call of this kind by `locker` on `key`.
    pub async fn attempt(self, locker: &Locker, key: &str) -> Result<Option<LockGuard>, LockError> {
        match self {
            Self::Lock => locker.try_lock(key).await,
            Self::QueuedLock => {
                let wait = LockOptions::new().wait(QUEUED_WAIT);
                locker.lock_with(key, wait).await.map(Some)
            }
            Self::Read => locker.rwlock(key)?.try_read().await,
            Self::Permit => locker.semaphore(key, PERMIT_LIMIT)?.try_acquire().await,
        }
    }

    /// What the next taker does: take what an orphan of this kind would
    /// keep it out of, at once.
    async fn next_taker(self, locker: &Locker, key: &str) -> Result<Option<LockGuard>, LockError> {
        match self {
            Self::Lock | Self::QueuedLock | Self::Read => locker.try_lock(key).await,
            Self::Permit => locker.semaphore(key, PERMIT_LIMIT)?.try_acquire().await,
        }
    }

    /// Whether anybody holds what this kind takes of `key`.
    async fn held(self, locker: &Locker, key: &str) -> bool {
        let holders = match self {
            Self::Permit => locker.permit_holders(key).await,
            _ => locker.holders(key).await,
        };
        !holders.unwrap().is_empty()
    }
}

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
    /// was read; `Err` saying what it shows otherwise. It must not take
    /// the abandoned acquisition's clean-up for the late request itself,
    /// nor need the clean-up to have run (then a store whose clean-up is
    /// missing fails at [`kept`](Self::kept), where it should).
    fn reached(&self, before: &Self::Mark) -> impl Future<Output = Result<(), String>>;

    /// How many records the store keeps for the name `key` (as
    /// `Locker::name` names it in the lockers' namespace): holds and
    /// waiting entries of its lock, its read locks and its semaphore
    /// (keys, queue entries, nodes, rows).
    fn kept(&self, key: &str) -> impl Future<Output = usize>;
}

/// The store-specific set-up of one run of [`lost_reply`].
#[derive(Debug)]
pub struct LostReply<'a> {
    /// What the lost request asks for.
    pub acquisition: Acquisition,
    /// The server to freeze: the lockers must talk to it alone (or to
    /// the servers of a [`Together`]).
    pub server: &'a dyn Pausable,
    /// How the caller gives up on the frozen server.
    pub give_up: GiveUp,
    /// When the server is frozen: `None` before the attempt starts; else
    /// this long after it started, for stores whose acquisition of this
    /// kind makes a round trip before the request that creates state (the
    /// locker then talks through a slowed-down link, so that the freeze
    /// falls between the two).
    pub freeze_after: Option<Duration>,
    /// The key the first locker takes (as the acquisition's kind does) and
    /// releases before the freeze, so that connections, sessions,
    /// directories and scripts exist by then.
    pub warm_key: &'a str,
    /// The keys to try in turn until one attempt's request reaches the
    /// store after its caller gave up (a client library may cancel a
    /// request before its bytes leave); one key where every attempt must.
    pub keys: &'a [&'a str],
    /// How long the store may take, once resumed, to show the late
    /// request applied.
    pub reach_within: Duration,
    /// How long the store may then keep records of the key besides the
    /// holder's: `None` when nothing may be left by the time the request
    /// shows as applied. Shorter than what a leftover would block the
    /// next taker for.
    pub clean_within: Option<Duration>,
}

/// What [`lost_reply`] saw, for a store's own further checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostReplySeen {
    /// The key whose acquisition lost its reply.
    pub key: String,
    /// The fencing token of the warm-up hold.
    pub warm_token: u64,
    /// The fencing token the second locker got on the key afterwards.
    pub taken_token: u64,
}

/// Runs the scenario for `plan.acquisition`: `a` warms up, then loses the
/// reply of an attempt on a key of `plan.keys` whose request reaches the
/// store (`store`'s counter proves it) — for the queued case while `b`
/// holds the key; the store then keeps no record of the key but `b`'s
/// hold (within `plan.clean_within`), `b` takes it at once (after giving
/// up its hold) with a token above the warm-up's, and the store keeps one
/// record, the new holder's. Panics naming the step that failed, and
/// when the store lacks the primitive (a case a store cannot run is
/// marked so in its test file, never passed).
pub async fn lost_reply<S: LostReplyStore>(
    plan: &LostReply<'_>,
    store: &S,
    a: &Locker,
    b: &Locker,
) -> LostReplySeen {
    let kind = plan.acquisition;
    assert!(
        kind.supported_by(a),
        "{kind:?} on a store without it ({}): mark the case as not applicable instead",
        a.backend_name()
    );
    let warm_token = warm_up(kind, a, plan.warm_key).await;
    let mut late = Err("no key to try".to_owned());
    for key in plan.keys {
        let holder = hold_before(kind, b, key).await;
        let before = store.mark().await;
        lose_the_reply(plan, a, key).await;
        let reached = eventually(plan.reach_within, "the late request applied", || {
            store.reached(&before)
        });
        match reached.await {
            Ok(()) => {
                late = Ok((*key, holder));
                break;
            }
            Err(why) => {
                late = Err(why);
                if let Some(holder) = holder {
                    holder.release().await.unwrap();
                }
            }
        }
    }
    let (key, holder) = late.unwrap_or_else(|last| {
        panic!("no attempt reached the store after its caller gave up: {last}")
    });
    let holders = usize::from(holder.is_some());
    nothing_kept(plan, store, key, holders).await;
    if let Some(holder) = holder {
        holder.release().await.unwrap();
    }
    let guard = kind
        .next_taker(b, key)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{key} is not free for the next taker"));
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

/// `a` takes `key` as `kind` does (a plain lock for the queued case) and
/// releases it; returns the hold's token.
async fn warm_up(kind: Acquisition, a: &Locker, key: &str) -> u64 {
    let kind = match kind {
        Acquisition::QueuedLock => Acquisition::Lock,
        other => other,
    };
    let warm = kind.attempt(a, key).await.unwrap().expect("a warms up");
    let token = warm.token().get();
    warm.release().await.unwrap();
    token
}

/// What stands on `key` before the lost attempt: for the queued case,
/// `b`'s lock (returned); otherwise nothing, checked.
async fn hold_before(kind: Acquisition, b: &Locker, key: &str) -> Option<LockGuard> {
    assert!(!kind.held(b, key).await, "{key} is held before the attempt");
    match kind {
        Acquisition::QueuedLock => Some(b.try_lock(key).await.unwrap().expect("b takes the key")),
        _ => None,
    }
}

/// Freezes the server (before `a`'s attempt on `key`, or
/// `plan.freeze_after` into it), lets the attempt be given up on as
/// `plan.give_up` says, and resumes the server — also when a check in
/// between fails, so that no other test finds it frozen.
async fn lose_the_reply(plan: &LostReply<'_>, a: &Locker, key: &str) {
    let thaw = Thaw(plan.server);
    let freeze = async {
        if let Some(after) = plan.freeze_after {
            tokio::time::sleep(after).await;
        }
        plan.server.pause().await.unwrap();
    };
    if plan.freeze_after.is_none() {
        freeze.await;
        give_up(plan, a, key).await;
    } else {
        tokio::join!(freeze, give_up(plan, a, key));
    }
    drop(thaw);
}

/// Resumes the frozen server when dropped.
struct Thaw<'a>(&'a dyn Pausable);

impl Drop for Thaw<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.0.resume() {
            // Not while unwinding: that would abort and hide the failure.
            assert!(std::thread::panicking(), "resume the frozen server: {e}");
        }
    }
}

/// `a`'s attempt on `key`, given up on as `plan.give_up` says.
async fn give_up(plan: &LostReply<'_>, a: &Locker, key: &str) {
    let attempt = plan.acquisition.attempt(a, key);
    match plan.give_up {
        GiveUp::ResponseTimeout => {
            let attempt = attempt.await;
            assert!(
                matches!(attempt, Err(LockError::Unavailable { .. })),
                "{attempt:?}"
            );
        }
        GiveUp::Deadline(after) => {
            let attempt = tokio::time::timeout(after, attempt).await;
            assert!(attempt.is_err(), "answered by a frozen server: {attempt:?}");
        }
    }
}

/// Checks that the store keeps no record of `key` but the `holders` it
/// had before: at once, or within `plan.clean_within`.
async fn nothing_kept<S: LostReplyStore>(
    plan: &LostReply<'_>,
    store: &S,
    key: &str,
    holders: usize,
) {
    let Some(within) = plan.clean_within else {
        let kept = store.kept(key).await;
        assert_eq!(
            kept,
            holders,
            "records of {key}: {kept}, {}",
            expected(holders)
        );
        return;
    };
    eventually(within, "the late record deleted", || async {
        match store.kept(key).await {
            n if n == holders => Ok(()),
            n => Err(format!("records of {key}: {n}, {}", expected(holders))),
        }
    })
    .await
    .unwrap();
}

/// What [`nothing_kept`] expects, in words.
fn expected(holders: usize) -> String {
    match holders {
        0 => "none expected".to_owned(),
        n => format!("{n} expected (the holder's)"),
    }
}

/// Servers frozen and resumed as one: a Redis Cluster's masters, a
/// majority of Redlock's. Frozen in turn, resumed in turn.
#[derive(Debug)]
pub struct Together<'a>(pub Vec<&'a dyn Pausable>);

impl Pausable for Together<'_> {
    fn pause(&self) -> PauseFuture<'_> {
        Box::pin(async move {
            for server in &self.0 {
                server.pause().await?;
            }
            Ok(())
        })
    }

    /// Every server, even after one failed; the first failure is
    /// returned.
    fn resume(&self) -> Result<(), String> {
        let resumed: Vec<Result<(), String>> = self.0.iter().map(|s| s.resume()).collect();
        resumed.into_iter().collect()
    }
}
