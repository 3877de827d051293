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

use lock_core::backend::{AcquireRequest, Acquired, Renewal};
use lock_core::{FencingToken, HoldKind, LockError};

use crate::client::is_lease_not_found;
use crate::core::EtcdCore;
use crate::held::HeldEntry;
use crate::session::Lease;
use crate::{keys, limit};

pub(crate) use entry::{queue_line, Entry};
pub(crate) use turn::Turn;
use turn::{Position, View};

/// Takes the lock of `request`; see the module docs. `Ok(None)` when a
/// [`WaitMode::Try`](lock_core::backend::WaitMode::Try) finds it held.
/// Cancel-safe: a dropped call deletes its queue entry in the background.
pub(crate) async fn acquire(
    core: &Arc<EtcdCore>,
    request: &AcquireRequest,
) -> Result<Option<Acquired>, LockError> {
    let prefix = queue_prefix(core, request).await?;
    // This backend's own abandoned entry on the queue (a writer that gave
    // up) must not hold this acquisition back.
    let line = entry::queue_line(&prefix);
    core.leaving
        .settled(&line, core.config.response_timeout)
        .await;
    let started = Instant::now();
    let mut requeues = Requeues::default();
    loop {
        requeues.next().await;
        let lease = core
            .sessions
            .lease(request.ttl, core.retry_deadline(request.wait))
            .await?;
        let (entry, view) = match Entry::enqueue(core, &prefix, &lease, request).await {
            Ok(queued) => queued,
            // Revoked or expired before the keepalive noticed: a new one.
            Err(error) if is_lease_not_found(&error) => {
                lease.gone();
                continue;
            }
            Err(error) => return Err(error),
        };
        let decided_at = match wait_turn(core, &entry.at, &lease, view, request).await? {
            Turn::Holder { revision } => revision,
            Turn::Busy => {
                entry.withdraw(core).await?;
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
        let held = HeldEntry::start(core, entry.into_key(), lease, request, decided_at);
        return Ok(Some(Acquired {
            token,
            requested_at: started,
            renewal: Renewal::Managed,
            held: Box::new(held),
        }));
    }
}

/// The prefix `request` queues under: the lock's queue, or for a permit
/// the semaphore's, once its limit is checked (see [`crate::limit`]).
async fn queue_prefix(core: &EtcdCore, request: &AcquireRequest) -> Result<Vec<u8>, LockError> {
    match request.kind {
        HoldKind::Permit { limit } => {
            let deadline = core.retry_deadline(request.wait);
            limit::check_limit(core, &request.name, limit, deadline).await?;
            Ok(keys::permits_prefix(&request.name))
        }
        _ => Ok(keys::queue_prefix(&request.name)),
    }
}

/// Waits for the turn of our entry `at`, as its kind of hold has it: a
/// reader's, a permit's, or a writer's (from `view`, what the entry's put
/// read).
async fn wait_turn(
    core: &EtcdCore,
    at: &Position,
    lease: &Lease,
    view: View,
    request: &AcquireRequest,
) -> Result<Turn, LockError> {
    match request.kind {
        HoldKind::Shared => at.wait_read_turn(core, lease, request.wait).await,
        HoldKind::Permit { limit } => at.wait_permit_turn(core, lease, limit, request.wait).await,
        _ => at.wait_turn(core, lease, view, request.wait).await,
    }
}

/// An acquisition's tries at queueing. From the second on, each waits
/// 10 ms longer than the one before (at most 500 ms): an entry that keeps
/// vanishing (its lease lost, or deleted from outside) must not make the
/// acquisition hammer the cluster.
#[derive(Debug, Default)]
pub(crate) struct Requeues(u32);

impl Requeues {
    /// Waits before the next try, if it is not the first.
    pub(crate) async fn next(&mut self) {
        if self.0 > 0 {
            tokio::time::sleep(Duration::from_millis(10) * self.0.min(50)).await;
        }
        self.0 += 1;
    }
}
