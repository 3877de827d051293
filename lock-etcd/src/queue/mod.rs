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
//! `entry` puts and removes our entry; `turn` waits for it to reach the
//! head of the queue.
//!
//! [`WatchHub::watch_deletion`]: crate::watch::WatchHub::watch_deletion

mod entry;
mod permit;
mod read;
mod turn;

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOpResponse, TxnResponse,
};
use lock_core::backend::{AcquireRequest, Acquired, Renewal};
use lock_core::{FencingToken, HoldKind, LockError};

use crate::backend::Shared;
use crate::client::{is_lease_not_found, with_retries};
use crate::held::HeldEntry;
use crate::keys;

use entry::Entry;
pub(crate) use permit::forget_unused_limit;

/// Takes the lock of `request`; see the module docs. `Ok(None)` when a
/// [`WaitMode::Try`](lock_core::backend::WaitMode::Try) finds it held.
/// Cancel-safe: a dropped call deletes its queue entry in the background.
pub(crate) async fn acquire(
    shared: &Arc<Shared>,
    request: &AcquireRequest,
) -> Result<Option<Acquired>, LockError> {
    let prefix = match request.kind {
        HoldKind::Permit { limit } => {
            let deadline = shared.retry_deadline(request.wait);
            permit::check_limit(shared, &request.name, limit, deadline).await?;
            keys::permits_prefix(&request.name)
        }
        _ => keys::queue_prefix(&request.name),
    };
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
        let turn = match request.kind {
            HoldKind::Shared => {
                entry
                    .at
                    .wait_read_turn(shared, &lease, request.wait)
                    .await?
            }
            HoldKind::Permit { limit } => {
                let wait = request.wait;
                entry
                    .at
                    .wait_permit_turn(shared, &lease, limit, wait)
                    .await?
            }
            _ => {
                entry
                    .at
                    .wait_turn(shared, &lease, view, request.wait)
                    .await?
            }
        };
        let decided_at = match turn {
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

/// Reads at most `limit` keys, keys only, newest first by create revision.
fn newest_first(limit: i64) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(limit)
        .with_keys_only()
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
