//! Acquiring: the revision-ordered queue of one lock.
//!
//! An acquisition puts a unique entry under the lock's prefix, attached to
//! the session lease, in one transaction that also reads the two newest
//! entries: ours and, if any, our predecessor (the entry created just
//! before ours). No predecessor: the lock is ours, after one round trip.
//! Otherwise we watch only the predecessor's deletion — no herd; FIFO —
//! and read again when it goes: the predecessor may have been a waiter
//! that gave up, with an older entry still ahead of us. (Where the watch
//! starts, and why the reads are made at fixed revisions: see
//! [`WatchHub::watch_deletion`] and `Position::check_at`.)
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
use crate::watch::Fired;

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
    predecessor: Option<Vec<u8>>,
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
    /// Puts a fresh entry and reads its predecessor, in one transaction.
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
                TxnOp::get(prefix.to_vec(), Some(newest_first(2))),
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
        let ranges = ranges(&response);
        if response.succeeded() {
            // Our entry is the newest under the prefix as of this revision.
            entry.at.revision = header_revision(&response);
            let newest = ranges.first().map(Vec::as_slice).unwrap_or_default();
            let view = View {
                revision: entry.at.revision,
                own_exists: true,
                predecessor: newest.get(1).map(|(key, _)| key.clone()),
            };
            return Ok((entry, view));
        }
        // An earlier try of this very request went through.
        let own = ranges.first().and_then(|r| r.first());
        entry.at.revision = own.map_or(0, |(_, revision)| *revision);
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

    /// The same read, as of `revision` (our predecessor's deletion), served
    /// by whichever member answers without a round through the leader.
    ///
    /// This is the hand-off's only read, and a linearizable one would wait
    /// for the leader's next raft cycle, which under load means for the
    /// fsync of other clients' writes. A read *at a fixed revision* needs no
    /// such wait to be exact: it shows the queue as it was right after the
    /// deletion, which is what decides whether we hold the lock from then
    /// on (changes after it are caught by the watch on our own entry, which
    /// starts at `revision + 1`). A member that has not applied `revision`
    /// yet, or has compacted it, answers with an error: read linearizably.
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

    /// One range read of the queue: the two newest entries created no
    /// later than ours — ours, if it still exists, and the one before it;
    /// linearizable, or serializable as of revision `at`.
    fn check_read(&self, at: Option<i64>) -> GetOptions {
        let read = newest_first(2).with_max_create_revision(self.revision);
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
        let predecessor = entries
            .iter()
            .find(|entry| entry.create_revision() < self.revision)
            .map(|entry| entry.key().to_vec());
        View {
            revision,
            own_exists,
            predecessor,
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
            let Some(predecessor) = view.predecessor.take() else {
                return Ok(Turn::Holder {
                    revision: view.revision,
                });
            };
            if !wait.may_wait() {
                return Ok(Turn::Busy);
            }
            let next = self.wait_for_deletion(shared, predecessor, &view, &mut lease_lost, wait);
            match next.await? {
                Some(next) => view = next,
                None => return Ok(Turn::Requeue),
            }
        }
    }

    /// Watches `predecessor` (the one `view` found) until the queue may
    /// have changed in our favour, and returns a fresh view; `None` if the
    /// session was lost meanwhile.
    async fn wait_for_deletion(
        &self,
        shared: &Shared,
        predecessor: Vec<u8>,
        view: &View,
        lease_lost: &mut watch::Receiver<bool>,
        wait: WaitMode,
    ) -> Result<Option<View>, LockError> {
        let (fired_tx, mut fired) = mpsc::unbounded_channel();
        let _watch = shared.hub.watch_deletion(
            predecessor.clone(),
            view.revision,
            Box::new(move |event| {
                let _ = fired_tx.send(event);
            }),
        );
        loop {
            let event = tokio::select! {
                event = fired.recv() => event,
                _ = lease_lost.wait_for(|lost| *lost) => return Ok(None),
            };
            let deadline = shared.retry_deadline(wait);
            let next = match event {
                // Nothing was written since our read: nothing to check.
                Some(Fired::Created { revision }) if revision <= view.revision => continue,
                // The watch starts at `revision`: what happened before it
                // must be read.
                Some(Fired::Created { revision }) => {
                    self.check_at(shared, revision, deadline).await?
                }
                Some(Fired::Deleted { revision }) => {
                    return self.check_at(shared, revision, deadline).await.map(Some)
                }
                Some(Fired::Refused(reason)) => {
                    return Err(LockError::Backend {
                        message: format!("etcd refused to watch the lock queue: {reason}"),
                        source: None,
                    })
                }
                // Compacted history, or the hub went away: read afresh.
                Some(Fired::Compacted) | None => {
                    return self.check(shared, deadline).await.map(Some)
                }
            };
            let unchanged = next.own_exists && next.predecessor.as_ref() == Some(&predecessor);
            if !unchanged {
                return Ok(Some(next));
            }
        }
    }
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

/// The key and create revision of each range read of a transaction.
pub(crate) fn ranges(response: &TxnResponse) -> Vec<Vec<(Vec<u8>, i64)>> {
    response
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(
                get.kvs()
                    .iter()
                    .map(|kv| (kv.key().to_vec(), kv.create_revision()))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}
