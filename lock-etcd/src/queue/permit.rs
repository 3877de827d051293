//! A semaphore's queue: entries under `<key>%permits/`, ordered by create
//! revision; the first `limit` hold a permit. The limit is stored beside
//! the queue (`<key>%limit`).
//!
//! A waiter can be let in only by the deletion of one of the `limit`
//! entries just ahead of it: while all of them stand, at least `limit`
//! entries are older than it. So it watches exactly those (on the
//! backend's shared watch stream) and reads the queue again when one goes.
//! A release therefore wakes the waiters that have the released entry
//! among their `limit` nearest: the first waiter when the oldest holder
//! leaves, at most `limit` waiters otherwise, each making one read.

use std::time::Instant;

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, Txn, TxnOp};
use lock_core::backend::WaitMode;
use lock_core::{LockError, LockName};
use tokio::sync::mpsc;

use super::read::next_read;
use super::turn::{watch_deletion_into, Position};
use super::{run_txn, Turn};
use crate::backend::Shared;
use crate::keys;
use crate::session::Lease;
use crate::watch::WatchGuard;

/// Checks `limit` against the semaphore's stored limit while any entry
/// is queued, and stores it when none is.
pub(super) async fn check_limit(
    shared: &Shared,
    name: &LockName,
    limit: u32,
    deadline: Instant,
) -> Result<(), LockError> {
    let limit_key = keys::limit_key(name);
    let prefix = keys::permits_prefix(name);
    let counted = GetOptions::new().with_prefix().with_count_only();
    // Stored already: nothing to write.
    let txn = Txn::new()
        .when([Compare::value(
            limit_key.clone(),
            CompareOp::Equal,
            limit.to_string(),
        )])
        .or_else([
            TxnOp::get(limit_key.clone(), None),
            TxnOp::get(prefix.clone(), Some(counted)),
        ]);
    let response = run_txn(&shared.client, deadline, "cannot read the semaphore", txn).await?;
    if response.succeeded() {
        return Ok(());
    }
    let mut ranges = response
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            etcd_client::TxnOpResponse::Get(get) => Some(get),
            _ => None,
        });
    let stored = ranges
        .next()
        .and_then(|get| get.kvs().first().map(|kv| kv.value().to_vec()))
        .and_then(|value| String::from_utf8(value).ok()?.parse::<u32>().ok());
    let queued = ranges.next().map_or(0, |get| get.count());
    if let Some(stored) = stored.filter(|_| queued > 0) {
        return Err(LockError::LimitMismatch {
            key: name.key().to_string(),
            stored,
            asked: limit,
        });
    }
    let mut kv = shared.client.kv_client();
    kv.put(limit_key, limit.to_string(), None)
        .await
        .map_err(|e| LockError::unavailable("cannot store the semaphore's limit", e))?;
    Ok(())
}

/// Deletes the stored limit of `name`'s semaphore if no entry is queued
/// any more, in one transaction: a limit goes with its last permit, so a
/// semaphore nobody uses leaves no key behind. Called after a permit is
/// given back; a request that stores the limit again meanwhile is seen by
/// the transaction's compare or stores it after.
pub(crate) async fn forget_unused_limit(
    shared: &Shared,
    name: &LockName,
    deadline: Instant,
) -> Result<(), LockError> {
    // Over a range, a compare holds for every key in it, and an empty
    // range compares as one key at version 0.
    let nobody_queued =
        Compare::version(keys::permits_prefix(name), CompareOp::Equal, 0).with_prefix();
    let txn = Txn::new()
        .when([nobody_queued])
        .and_then([TxnOp::delete(keys::limit_key(name), None)]);
    let context = "cannot remove the semaphore's unused limit";
    run_txn(&shared.client, deadline, context, txn).await?;
    Ok(())
}

/// What a read of the entries up to ours showed, as of `revision`.
struct PermitView {
    revision: i64,
    own_exists: bool,
    /// The entries older than ours, nearest first.
    ahead: Vec<Vec<u8>>,
}

impl Position {
    /// Waits until fewer than `limit` entries are ahead of ours, or for
    /// `Try` says they are not.
    pub(super) async fn wait_permit_turn(
        &self,
        shared: &Shared,
        lease: &Lease,
        limit: u32,
        wait: WaitMode,
    ) -> Result<Turn, LockError> {
        let limit = limit as usize;
        let mut lease_lost = lease.lost_signal();
        let mut view = self
            .read_permits(shared, None, shared.retry_deadline(wait))
            .await?;
        loop {
            if !view.own_exists || lease.is_lost() {
                return Ok(Turn::Requeue);
            }
            if view.ahead.len() < limit {
                return Ok(Turn::Holder {
                    revision: view.revision,
                });
            }
            if !wait.may_wait() {
                return Ok(Turn::Busy);
            }
            let (fired_tx, mut fired) = mpsc::unbounded_channel();
            let _watches: Vec<WatchGuard> = view.ahead[..limit]
                .iter()
                .map(|key| watch_deletion_into(shared, key, view.revision, fired_tx.clone()))
                .collect();
            let Some(at) = next_read(&mut fired, view.revision, &mut lease_lost).await? else {
                return Ok(Turn::Requeue);
            };
            view = self
                .read_permits(shared, at, shared.retry_deadline(wait))
                .await?;
        }
    }

    async fn read_permits(
        &self,
        shared: &Shared,
        at: Option<i64>,
        deadline: Instant,
    ) -> Result<PermitView, LockError> {
        let (entries, revision) = self.read_up_to_own(shared, at, deadline).await?;
        Ok(self.permit_view(&entries, revision))
    }

    fn permit_view(&self, entries: &[KeyValue], revision: i64) -> PermitView {
        PermitView {
            revision,
            own_exists: entries
                .first()
                .is_some_and(|entry| entry.create_revision() == self.revision),
            ahead: entries
                .iter()
                .filter(|entry| entry.create_revision() < self.revision)
                .map(|entry| entry.key().to_vec())
                .collect(),
        }
    }
}
