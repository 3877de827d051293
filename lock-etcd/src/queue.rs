//! Acquiring: the revision-ordered queue of one lock.
//!
//! An acquisition puts a unique entry under the lock's prefix, attached to
//! the session lease, in one transaction that also reads the three newest
//! entries: ours and, if any, the two created just before it. No
//! predecessor: the lock is ours, after one round trip. Otherwise we watch
//! only the predecessor's deletion — no herd; FIFO — and, while it is not
//! at the head, the deletion of the entry ahead of it.
//!
//! A predecessor's deletion hands us the lock only if it was at the head:
//! it may have been a waiter that gave up, with an older entry still ahead
//! of us. So when the entry ahead of the predecessor goes, we read the
//! queue again (the predecessor most likely took the lock just then), and
//! having seen the predecessor at the head, we take the lock on its
//! deletion with no read in between: the hand-off waits for no request.
//! Each entry is watched by at most the two waiters right behind it.
//! (Where the watches start, and why the reads are made at fixed
//! revisions: see [`WatchHub::watch_deletion`] and `Position::check_at`.)
//!
//! The holder is always the entry with the lowest create revision, which is
//! also its fencing token: later entries get higher revisions, so tokens
//! rise from holder to holder and survive server restarts with etcd's
//! revision counter.
//!
//! [`WatchHub::watch_deletion`]: crate::watch::WatchHub::watch_deletion

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse, TxnResponse,
};
use lock_core::{
    AcquireRequest, Acquired, CleanupOnDrop, FencingToken, LockError, Renewal, WaitMode,
};
use tokio::sync::{mpsc, watch};

use crate::backend::Shared;
use crate::client::{is_lease_not_found, with_retries};
use crate::held::HeldEntry;
use crate::keys;
use crate::names::EntryName;
use crate::session::Lease;
use crate::watch::{Fired, WatchGuard};

/// Takes the lock of `request`; see the module docs. `Ok(None)` when a
/// [`WaitMode::Try`] finds it held. Cancel-safe: a dropped call deletes
/// its queue entry in the background.
pub(crate) async fn acquire(
    shared: &Arc<Shared>,
    request: &AcquireRequest,
) -> Result<Option<Acquired>, LockError> {
    let prefix = keys::queue_prefix(&request.name);
    let started = Instant::now();
    let mut requeues = 0u32;
    loop {
        if requeues > 0 {
            // Our entry keeps vanishing (its lease lost, or deleted from
            // outside): do not hammer the cluster while that goes on.
            let pause = Duration::from_millis(10) * requeues.min(50);
            tokio::time::sleep(pause).await;
        }
        requeues += 1;
        let lease = shared
            .sessions
            .lease(request.ttl, shared.retry_deadline(request.wait))
            .await?;
        let (entry, view) = match Entry::enqueue(shared, &prefix, &lease, request).await {
            Ok(queued) => queued,
            // Revoked or expired before the keepalive noticed: a new one.
            Err(error) if is_lease_not_found(&error) => {
                lease.gone();
                continue;
            }
            Err(error) => return Err(error),
        };
        let decided_at = match entry
            .at
            .wait_turn(shared, &lease, view, request.wait)
            .await?
        {
            Turn::Holder { revision } => revision,
            Turn::Busy => {
                entry.withdraw(shared).await?;
                return Ok(None);
            }
            // Our entry or its lease vanished: queue again (the dropped
            // entry deletes whatever is left of it).
            Turn::Requeue => continue,
        };
        if !lease.register(request.loss.clone()) {
            continue;
        }
        let token = FencingToken::new(u64::try_from(entry.at.revision).unwrap_or(0));
        let held = HeldEntry::start(shared, entry.into_key(), lease, request, decided_at);
        return Ok(Some(Acquired {
            token,
            requested_at: started,
            renewal: Renewal::Managed,
            held: Box::new(held),
        }));
    }
}

/// What a read of the queue showed, as of `revision`.
struct View {
    revision: i64,
    own_exists: bool,
    /// The entry just ahead of ours.
    predecessor: Option<Ahead>,
    /// The key of the entry ahead of the predecessor; `None` means the
    /// predecessor was at the head of the queue.
    second: Option<Vec<u8>>,
}

/// An entry ahead of ours in the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Ahead {
    key: Vec<u8>,
    /// The lease the entry is attached to.
    lease: i64,
}

enum Turn {
    Holder { revision: i64 },
    Busy,
    Requeue,
}

/// Our entry in the queue; deleted in the background if dropped armed.
struct Entry {
    at: Position,
    name: Arc<EntryName>,
    cleanup: CleanupOnDrop,
}

/// Where our entry is (its key is the entry's name).
struct Position {
    prefix: Vec<u8>,
    /// The entry's create revision.
    revision: i64,
}

/// Reads at most `limit` keys, keys only, newest first by create revision.
fn newest_first(limit: i64) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(limit)
        .with_keys_only()
}

impl Entry {
    /// Puts our entry and reads the two entries before it, in one
    /// transaction.
    async fn enqueue(
        shared: &Shared,
        prefix: &[u8],
        lease: &Lease,
        request: &AcquireRequest,
    ) -> Result<(Self, View), LockError> {
        let name = shared.names.reserve(prefix, lease.id());
        let key = name.key().to_vec();
        // Armed before the request leaves: if this call is dropped while
        // the reply is in flight, the entry may exist and must go.
        let cleanup = CleanupOnDrop::new(delete_entry(
            shared.client.clone(),
            Arc::clone(&name),
            shared.config.response_timeout,
        ));
        let put = PutOptions::new().with_lease(lease.id());
        // The name is reserved for this call, so "create if absent" makes a
        // retry after a lost reply harmless: the else branch finds the
        // entry we made.
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(key.clone(), request.owner.as_str(), Some(put)),
                TxnOp::get(prefix.to_vec(), Some(newest_first(3))),
            ])
            .or_else([TxnOp::get(
                key.clone(),
                Some(GetOptions::new().with_keys_only()),
            )]);
        let deadline = shared.retry_deadline(request.wait);
        let response = run_txn(&shared.client, deadline, "cannot queue for the lock", txn).await?;
        let mut entry = Self {
            at: Position {
                prefix: prefix.to_vec(),
                revision: 0,
            },
            name,
            cleanup,
        };
        let newest = first_range(&response);
        if response.succeeded() {
            // Our entry is the newest under the prefix as of this revision,
            // created by this transaction.
            entry.at.revision = header_revision(&response);
            let view = entry.at.view(&newest, entry.at.revision);
            return Ok((entry, view));
        }
        // An earlier try of this very request went through.
        entry.at.revision = newest.first().map_or(0, KeyValue::create_revision);
        let view = entry.at.check(shared, deadline).await?;
        Ok((entry, view))
    }

    /// Deletes our entry after a failed `try_lock`, and disarms the clean-up.
    async fn withdraw(self, shared: &Shared) -> Result<(), LockError> {
        let deadline = shared.retry_deadline(WaitMode::Try);
        with_retries(deadline, "cannot leave the lock queue", || {
            let mut kv = shared.client.kv_client();
            let key = self.name.key().to_vec();
            async move { kv.delete(key, None).await }
        })
        .await?;
        self.cleanup.disarm();
        self.name.mark_gone();
        Ok(())
    }

    /// The entry's name and create revision, now the holder's: no clean-up.
    fn into_key(self) -> (Arc<EntryName>, i64) {
        self.cleanup.disarm();
        (self.name, self.at.revision)
    }
}

impl Position {
    /// Reads, linearizably, whether our entry still exists and which entry
    /// precedes it.
    async fn check(&self, shared: &Shared, deadline: Instant) -> Result<View, LockError> {
        let read = self.check_read(None);
        let response = with_retries(deadline, "cannot read the lock queue", || {
            let mut kv = shared.client.kv_client();
            let (prefix, read) = (self.prefix.clone(), read.clone());
            async move { kv.get(prefix, Some(read)).await }
        })
        .await?;
        let revision = response.header().map_or(0, |h| h.revision());
        Ok(self.view(response.kvs(), revision))
    }

    /// The same read, as of `revision` (the deletion of an entry ahead of
    /// ours), served by whichever member answers without a round through
    /// the leader.
    ///
    /// A linearizable read would wait for the leader's next raft cycle,
    /// which under load means for the fsync of other clients' writes. A
    /// read *at a fixed revision* needs no such wait to be exact: it shows
    /// the queue as it was right after the deletion, which is what decides
    /// whether we hold the lock from then on (changes after it are caught
    /// by the watches, which start at `revision + 1`). A member that has
    /// not applied `revision` yet, or has compacted it, answers with an
    /// error: read linearizably.
    async fn check_at(
        &self,
        shared: &Shared,
        revision: i64,
        deadline: Instant,
    ) -> Result<View, LockError> {
        let mut kv = shared.client.kv_client();
        match kv
            .get(self.prefix.clone(), Some(self.check_read(Some(revision))))
            .await
        {
            Ok(response) => Ok(self.view(response.kvs(), revision)),
            Err(_) => self.check(shared, deadline).await,
        }
    }

    /// One range read of the queue: the three newest entries created no
    /// later than ours — ours, if it still exists, and the two before it;
    /// linearizable, or serializable as of revision `at`.
    fn check_read(&self, at: Option<i64>) -> GetOptions {
        let read = newest_first(3).with_max_create_revision(self.revision);
        match at {
            Some(revision) => read.with_serializable().with_revision(revision),
            None => read,
        }
    }

    /// The view a [`check_read`](Self::check_read) of `entries` gives, as
    /// of `revision`. An entry under our key with another create revision
    /// is not ours (it is newer, and excluded by the read).
    fn view(&self, entries: &[KeyValue], revision: i64) -> View {
        let own_exists = entries
            .first()
            .is_some_and(|entry| entry.create_revision() == self.revision);
        let mut older = entries
            .iter()
            .filter(|entry| entry.create_revision() < self.revision);
        let predecessor = older.next().map(|entry| Ahead {
            key: entry.key().to_vec(),
            lease: entry.lease(),
        });
        View {
            revision,
            own_exists,
            predecessor,
            second: older.next().map(|entry| entry.key().to_vec()),
        }
    }

    /// Waits until our entry is the oldest (or, for `Try`, says it is not).
    async fn wait_turn(
        &self,
        shared: &Shared,
        lease: &Lease,
        mut view: View,
        wait: WaitMode,
    ) -> Result<Turn, LockError> {
        let mut lease_lost = lease.lost_signal();
        loop {
            if !view.own_exists || lease.is_lost() {
                return Ok(Turn::Requeue);
            }
            let Some(predecessor) = view.predecessor.clone() else {
                return Ok(Turn::Holder {
                    revision: view.revision,
                });
            };
            if !wait.may_wait() {
                return Ok(Turn::Busy);
            }
            let next =
                self.wait_for_deletion(shared, lease, predecessor, view, &mut lease_lost, wait);
            match next.await? {
                Some(next) => view = next,
                None => return Ok(Turn::Requeue),
            }
        }
    }

    /// Watches `predecessor` (the one `view` found), and the entry ahead
    /// of it if there is one, until the queue may have changed in our
    /// favour; returns the view to decide on next. `None` if the session
    /// was lost meanwhile.
    ///
    /// When the entry ahead of the predecessor goes, the queue is read
    /// again while the predecessor most likely holds the lock: seeing it at
    /// the head then, we take the lock on its deletion without another
    /// read, so the hand-off waits for no request. That needs our own
    /// entry to still exist: it did as of the view, and the holder's watch
    /// on it replays every change since ([`HeldEntry::start`] is given the
    /// view's revision), so an entry removed from outside in between is
    /// reported lost at once. A predecessor on our own lease (another call
    /// of this locker) is always read after: a revoked lease deletes both
    /// entries in one go.
    async fn wait_for_deletion(
        &self,
        shared: &Shared,
        lease: &Lease,
        predecessor: Ahead,
        mut view: View,
        lease_lost: &mut watch::Receiver<bool>,
        wait: WaitMode,
    ) -> Result<Option<View>, LockError> {
        let (mut predecessor_fired, _predecessor_watch) =
            watch_deletion(shared, &predecessor.key, view.revision);
        let mut second = view
            .second
            .as_ref()
            .map(|key| watch_deletion(shared, key, view.revision));
        loop {
            let second_fired = async {
                match second.as_mut() {
                    Some((fired, _)) => Some(fired.recv().await),
                    None => std::future::pending().await,
                }
            };
            let (about_predecessor, event) = tokio::select! {
                event = predecessor_fired.recv() => (true, event),
                Some(event) = second_fired => (false, event),
                _ = lease_lost.wait_for(|lost| *lost) => return Ok(None),
            };
            // A predecessor watch that reported anything but its creation
            // has ended.
            let predecessor_watched =
                !about_predecessor || matches!(event, Some(Fired::Created { .. }));
            let deadline = shared.retry_deadline(wait);
            let next = match event {
                // Nothing was written since our read: nothing to check.
                Some(Fired::Created { revision }) if revision <= view.revision => continue,
                Some(Fired::Deleted { .. })
                    if about_predecessor
                        && view.second.is_none()
                        && predecessor.lease != lease.id() =>
                {
                    // At the head as of `view`, and now gone: ours.
                    return Ok(Some(View {
                        predecessor: None,
                        ..view
                    }));
                }
                // The watch starts at `revision`: what happened before it
                // must be read. Or a deletion: read the queue as of it.
                Some(Fired::Created { revision } | Fired::Deleted { revision }) => {
                    self.check_at(shared, revision, deadline).await?
                }
                Some(Fired::Refused(reason)) => {
                    return Err(LockError::Backend {
                        message: format!("etcd refused to watch the lock queue: {reason}"),
                        source: None,
                    })
                }
                // Compacted history, or the hub went away: read afresh.
                Some(Fired::Compacted) | None => self.check(shared, deadline).await?,
            };
            let same_predecessor =
                next.own_exists && next.predecessor.as_ref() == Some(&predecessor);
            if !same_predecessor || !predecessor_watched {
                return Ok(Some(next));
            }
            // Still waiting on the same predecessor: keep its watch, and
            // watch whichever entry is now ahead of it.
            if next.second != view.second || !about_predecessor {
                second = next
                    .second
                    .as_ref()
                    .map(|key| watch_deletion(shared, key, next.revision));
            }
            view = next;
        }
    }
}

/// A deletion watch on `key` after revision `after`, on the backend's hub,
/// and the channel its events arrive on.
fn watch_deletion(
    shared: &Shared,
    key: &[u8],
    after: i64,
) -> (mpsc::UnboundedReceiver<Fired>, WatchGuard) {
    let (fired_tx, fired) = mpsc::unbounded_channel();
    let guard = shared.hub.watch_deletion(
        key.to_vec(),
        after,
        Box::new(move |event| {
            let _ = fired_tx.send(event);
        }),
    );
    (fired, guard)
}

/// Deletes a queue entry whose acquire was abandoned. If nothing was
/// there, the put may still be in flight on another stream of the same
/// connection (etcd handles each request on its own): delete once more a
/// little later, which is harmless since the name stays reserved for this
/// call until then.
async fn delete_entry(client: Client, name: Arc<EntryName>, response_timeout: Duration) {
    const SECOND_TRY_AFTER: Duration = Duration::from_millis(250);
    let key = name.key().to_vec();
    let delete = || {
        let deadline = Instant::now() + response_timeout;
        with_retries(deadline, "cannot delete an abandoned queue entry", || {
            let mut kv = client.kv_client();
            let key = key.clone();
            async move { kv.delete(key, None).await }
        })
    };
    match delete().await {
        Ok(response) if response.deleted() > 0 => name.mark_gone(),
        Ok(_) => {
            tokio::time::sleep(SECOND_TRY_AFTER).await;
            if delete().await.is_ok() {
                name.mark_gone();
            }
        }
        Err(error) => {
            tracing::warn!(%error, "distlock: an abandoned etcd queue entry stays until its lease ends");
        }
    }
}

/// Runs a transaction, retrying while the cluster is unavailable.
pub(crate) async fn run_txn(
    client: &Client,
    deadline: Instant,
    context: &str,
    txn: Txn,
) -> Result<TxnResponse, LockError> {
    with_retries(deadline, context, || {
        let mut kv = client.kv_client();
        let txn = txn.clone();
        async move { kv.txn(txn).await }
    })
    .await
}

/// The revision of the store when the transaction ran.
pub(crate) fn header_revision(response: &TxnResponse) -> i64 {
    response.header().map_or(0, |h| h.revision())
}

/// The entries the first range read of a transaction found.
pub(crate) fn first_range(response: &TxnResponse) -> Vec<KeyValue> {
    response
        .op_responses()
        .into_iter()
        .find_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get.kvs().to_vec()),
            _ => None,
        })
        .unwrap_or_default()
}
