//! A held lock: our queue entry at the head of the queue.
//!
//! The session keeps the entry's lease alive ([`Renewal::Managed`]), so
//! there is nothing to renew per lock. What the session cannot see is the
//! entry being deleted from outside (an operator, `force_release`,
//! `etcdctl del`): the holder watches its own entry on the backend's watch
//! hub and reports [`LossReason::TakenAway`] when it goes.
//!
//! [`Renewal::Managed`]: lock_core::backend::Renewal::Managed

use std::fmt;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use lock_core::backend::{
    spawn_detached, AcquireRequest, Backoff, HeldLock, LossReporter, WaitMode,
};
use lock_core::{HoldKind, LockError, LockName, LossReason, OwnerId};

use crate::client::{delete_key, run_txn, with_retries};
use crate::concurrency::OwnerRecord;
use crate::core::EtcdCore;
use crate::limit;
use crate::names::EntryName;
use crate::session::Lease;
use crate::value;
use crate::watch::{Fired, WatchGuard};

/// How long a holder's watch on its own entry waits before it is created
/// on the server. Most locks are held for less: they then cost no watch
/// traffic at all, which keeps an uncontended lock+release at two
/// requests. A removal in the meantime is still reported (the watch
/// replays history from the acquisition), at most this much + 100 ms late.
const OWN_WATCH_DELAY: Duration = Duration::from_millis(100);

/// The holder's side of a lock: releases it and notices its removal.
pub(crate) struct HeldEntry {
    core: Arc<EtcdCore>,
    /// Our entry's key, reserved until the entry is known to be gone.
    entry: Arc<EntryName>,
    /// The entry's create revision: the fencing token.
    token: i64,
    lease: Arc<Lease>,
    /// Our owner id, stored with the value.
    owner: OwnerId,
    /// The lock key, for errors.
    name: String,
    /// The watch on our own entry; taken out before we delete it ourselves.
    watch: Arc<Mutex<Option<WatchGuard>>>,
    /// For a permit: the semaphore's name, whose stored limit the release
    /// deletes if it gave back the last permit.
    semaphore: Option<LockName>,
    /// `layout=concurrency`: how this hold differs from distlock's own.
    foreign: Option<ForeignHold>,
}

/// A hold in `layout=concurrency`: its entry's value is the holder's value
/// alone, our owner id is known only to this process (see
/// [`crate::concurrency`]), and the lease may be the hold's own.
pub(crate) struct ForeignHold {
    /// Our owner id, for `inspect` and watches of this process.
    pub(crate) record: OwnerRecord,
    /// The lease is this hold's alone: revoked when it is released.
    pub(crate) own_lease: bool,
}

impl HeldEntry {
    /// Starts holding `entry` (name, create revision), known to exist as
    /// of revision `decided_at`: any deletion after it is reported.
    pub(crate) fn start(
        core: &Arc<EtcdCore>,
        (name, token): (Arc<EntryName>, i64),
        lease: Arc<Lease>,
        request: &AcquireRequest,
        decided_at: i64,
    ) -> Self {
        let watch = Arc::new(Mutex::new(None));
        let own = OwnEntry {
            core: Arc::downgrade(core),
            key: name.key().to_vec(),
            token,
            lease: Arc::clone(&lease),
            reporter: request.loss.clone(),
            slot: Arc::downgrade(&watch),
        };
        own.watch_from(decided_at + 1, OWN_WATCH_DELAY);
        Self {
            core: Arc::clone(core),
            entry: name,
            token,
            lease,
            owner: request.owner.clone(),
            name: request.name.key().to_string(),
            watch,
            semaphore: matches!(request.kind, HoldKind::Permit { .. })
                .then(|| request.name.clone()),
            foreign: None,
        }
    }

    /// The same hold, laid out as `layout=concurrency` has it.
    pub(crate) fn foreign(mut self, hold: ForeignHold) -> Self {
        self.foreign = Some(hold);
        self
    }

    /// The bytes our entry stores for `value`.
    fn stored_value(&self, value: &str) -> Vec<u8> {
        match self.foreign {
            Some(_) => value.as_bytes().to_vec(),
            None => value::encode(self.owner.as_str(), value),
        }
    }

    /// Gives back a lease that was this hold's alone, once its entry is
    /// gone or no longer ours.
    async fn revoke_own_lease(&self) {
        if self.foreign.as_ref().is_some_and(|hold| hold.own_lease) {
            let deadline = self.core.retry_deadline(WaitMode::Try);
            self.lease.revoke(deadline).await;
        }
    }

    fn lost(&self) -> LockError {
        LockError::lost(self.name.clone(), loss_reason(&self.lease))
    }

    /// After a permit is given back: deletes its semaphore's stored limit
    /// if no entry is queued any more. The release has succeeded either
    /// way; a limit left behind is replaced by the next request that finds
    /// the semaphore empty, and deleted by the next last release.
    async fn forget_unused_limit(&self) {
        let Some(semaphore) = &self.semaphore else {
            return;
        };
        let deadline = self.core.retry_deadline(WaitMode::Try);
        if let Err(error) = limit::forget_unused_limit(&self.core, semaphore, deadline).await {
            tracing::debug!(%error, "distlock: the semaphore's limit stays until its next use");
        }
    }

    fn stop_watching(&self) {
        let guard = self.watch.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(guard);
    }
}

/// Why our entry is gone: with its session, or removed by someone.
fn loss_reason(lease: &Lease) -> LossReason {
    if lease.is_lost() {
        LossReason::SessionExpired
    } else {
        LossReason::TakenAway
    }
}

#[async_trait]
impl HeldLock for HeldEntry {
    /// Checks that the session lives and our entry is still there (called
    /// by `LockGuard::extend`; the session renews by itself).
    async fn renew(&self, _ttl: Duration) -> Result<(), LockError> {
        if self.lease.is_lost() {
            return Err(self.lost());
        }
        let deadline = self.core.retry_deadline(WaitMode::Try);
        let response = with_retries(deadline, "cannot check the lock", || {
            let mut kv = self.core.client.kv_client();
            let key = self.entry.key().to_vec();
            async move { kv.get(key, Some(GetOptions::new().with_keys_only())).await }
        })
        .await?;
        match response.kvs().first() {
            Some(kv) if kv.create_revision() == self.token => Ok(()),
            _ => Err(self.lost()),
        }
    }

    /// Deletes our entry with a plain delete; wakes the next waiter (it
    /// watches this entry).
    ///
    /// A plain delete names the entry by its key alone. It can only ever
    /// remove this acquisition's entry because the key is never handed to
    /// another acquisition while a request naming it may still reach the
    /// server: the name is given back (see [`crate::names`]) only when
    /// every delete sent for it was answered, so a delete whose answer was
    /// lost, or one retried, keeps the name reserved for the life of the
    /// backend. `deleted == 0` means the entry was gone already: the lock
    /// was lost (its session ended, or it was removed), unless an earlier
    /// try of this very release, whose answer was lost, removed it.
    ///
    /// If the cluster stays unavailable past `response_timeout`, this
    /// returns [`LockError::Unavailable`] and keeps trying in the
    /// background until the delete goes through or the session ends: the
    /// session would otherwise keep the entry, and the lock, alive for as
    /// long as this process runs.
    async fn release(&self) -> Result<(), LockError> {
        // Our own delete must not be reported as a loss.
        self.stop_watching();
        let deadline = self.core.retry_deadline(WaitMode::Try);
        let released = delete_entry(&self.core, self.entry.key(), &self.lease, deadline).await;
        if let Ok(Deleted {
            answered_first: true,
            ..
        }) = released
        {
            self.entry.mark_gone();
        }
        match released {
            Err(error) if error.is_retriable() => {
                let (core, name) = (Arc::clone(&self.core), Arc::clone(&self.entry));
                let lease = Arc::clone(&self.lease);
                spawn_detached(None, release_in_background(core, name, lease));
                Err(error)
            }
            Ok(Deleted { ours: true, .. }) => {
                self.forget_unused_limit().await;
                self.revoke_own_lease().await;
                Ok(())
            }
            Ok(Deleted { ours: false, .. }) => {
                let lost = self.lost();
                self.revoke_own_lease().await;
                Err(lost)
            }
            Err(error) => Err(error),
        }
    }

    /// Puts the new value on our entry if it is still the one we created,
    /// on the same lease. A put keeps the entry's create revision, so the
    /// token and our place stay; watchers see the put.
    async fn set_value(&self, value: &str) -> Result<(), LockError> {
        if self.lease.is_lost() {
            return Err(self.lost());
        }
        let key = self.entry.key().to_vec();
        let bytes = self.stored_value(value);
        let put = PutOptions::new().with_lease(self.lease.id());
        // The same put again after a lost answer is harmless.
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                self.token,
            )])
            .and_then([TxnOp::put(key, bytes, Some(put))]);
        let deadline = self.core.retry_deadline(WaitMode::Try);
        let response = run_txn(
            &self.core.client,
            deadline,
            "cannot set the lock's value",
            txn,
        )
        .await?;
        if response.succeeded() {
            Ok(())
        } else {
            Err(self.lost())
        }
    }

    /// The session lease's confirmed deadline: past it, etcd may have
    /// expired the lease and given the lock to another.
    fn valid_until(&self) -> Option<Instant> {
        Some(self.lease.valid_until())
    }
}

/// What a release's delete found.
struct Deleted {
    /// The entry was ours to delete: this delete removed it, or an earlier
    /// try of the same release whose answer was lost did.
    ours: bool,
    /// The first try was answered: no request naming the entry is left
    /// anywhere, so its name may be handed out again.
    answered_first: bool,
}

/// Deletes `key` (our entry) with a plain delete, retrying until
/// `deadline`; see [`HeldEntry::release`] for why that is safe.
async fn delete_entry(
    core: &EtcdCore,
    key: &[u8],
    lease: &Lease,
    deadline: Instant,
) -> Result<Deleted, LockError> {
    let done = delete_key(&core.client, key, "cannot release the lock", deadline).await?;
    // After a try whose answer was lost, that try may have deleted the
    // entry: absent now, with the session alive, counts as released.
    let ours = done.deleted || (!done.first_answered && !lease.is_lost());
    Ok(Deleted {
        ours,
        answered_first: done.first_answered,
    })
}

/// Keeps trying to delete an entry whose release failed, until it is
/// gone or its session ended (which removes it too). The name stays
/// reserved unless the session ended: an unanswered try may still arrive.
async fn release_in_background(core: Arc<EtcdCore>, name: Arc<EntryName>, lease: Arc<Lease>) {
    let pauses = Backoff::exponential(Duration::from_millis(100), Duration::from_secs(2));
    for pause in pauses.delays() {
        if lease.is_lost() {
            break;
        }
        tokio::time::sleep(pause).await;
        let deadline = core.retry_deadline(WaitMode::Try);
        match delete_entry(&core, name.key(), &lease, deadline).await {
            Err(error) if error.is_retriable() => {}
            Err(error) => {
                tracing::warn!(%error, "distlock: giving up releasing an etcd lock; it ends with its session");
                return;
            }
            Ok(_) => break,
        }
    }
    if lease.is_lost() {
        // Names carry the lease's id: a new session names its entries anew.
        name.mark_gone();
    }
}

impl fmt::Debug for HeldEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldEntry")
            .field("entry", &self.entry)
            .field("token", &self.token)
            .field("lease", &self.lease)
            .field("own_lease", &self.foreign.as_ref().map(|f| f.own_lease))
            .field("owner_known_for", &self.foreign.as_ref().map(|f| &f.record))
            .finish()
    }
}

/// What the watch on our own entry needs; `Weak` where it must not keep
/// the backend or the holder alive.
#[derive(Clone)]
struct OwnEntry {
    core: Weak<EtcdCore>,
    key: Vec<u8>,
    token: i64,
    lease: Arc<Lease>,
    reporter: LossReporter,
    slot: Weak<Mutex<Option<WatchGuard>>>,
}

impl OwnEntry {
    /// Watches our entry for deletion from `revision` on (created on the
    /// server after `delay`), keeping the watch in the holder's slot.
    fn watch_from(self, revision: i64, delay: Duration) {
        let (Some(core), Some(slot)) = (self.core.upgrade(), self.slot.upgrade()) else {
            return;
        };
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        let key = self.key.clone();
        let this = self.clone();
        let listener = Box::new(move |fired| this.fired(fired));
        *slot = Some(core.hub.watch_deletion_from(key, revision, delay, listener));
    }

    fn fired(&self, fired: Fired) {
        match fired {
            Fired::Created { .. } => {}
            Fired::Deleted { .. } => {
                self.reporter.report(loss_reason(&self.lease));
            }
            // The history since our watch started is gone: look at the
            // entry itself, then watch again from there.
            Fired::Compacted => {
                tokio::spawn(self.clone().recheck());
            }
            Fired::Refused(reason) => tracing::warn!(
                %reason,
                "distlock: etcd refused to watch a held lock; only session loss will be noticed"
            ),
        }
    }

    async fn recheck(self) {
        let Some(core) = self.core.upgrade() else {
            return;
        };
        let deadline = core.retry_deadline(WaitMode::Forever);
        let key = self.key.clone();
        let read = with_retries(deadline, "cannot check the lock", || {
            let mut kv = core.client.kv_client();
            let key = key.clone();
            async move { kv.get(key, Some(GetOptions::new().with_keys_only())).await }
        })
        .await;
        drop(core);
        match read {
            Ok(response) => {
                let ours = response
                    .kvs()
                    .first()
                    .is_some_and(|kv| kv.create_revision() == self.token);
                if ours {
                    let revision = response.header().map_or(0, |h| h.revision());
                    self.watch_from(revision + 1, Duration::ZERO);
                } else {
                    self.reporter.report(loss_reason(&self.lease));
                }
            }
            Err(error) => tracing::warn!(%error, "distlock: cannot re-check a held etcd lock"),
        }
    }
}
