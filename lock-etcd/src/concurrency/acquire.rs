//! Taking a hold in `layout=concurrency`, as Go's `Mutex.Lock` and
//! `Election.Campaign` do: one transaction puts our key if it is not
//! there (else reads it: an earlier try of this call made it) and reads
//! the first-created key under the prefix. Ours first: held. Otherwise
//! `try_lock` deletes its key again (Go's `TryLock`), and a waiter waits
//! for the deletion of the newest key created before its own, again
//! and again, until none is left.

use std::sync::Arc;
use std::time::Instant;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp};
use lock_core::backend::{AcquireRequest, Acquired, Renewal};
use lock_core::{FencingToken, LockError};

use super::{entry_key, lock_prefix, OwnerRecord};
use crate::client::{is_lease_not_found, range_reads, run_txn};
use crate::core::EtcdCore;
use crate::held::{ForeignHold, HeldEntry};
use crate::names::EntryName;
use crate::queue::{queue_line, Entry, Requeues, Turn};
use crate::session::Lease;

/// Takes the hold `request` asks for under `<key_prefix><key>/`; see the
/// module docs. `Ok(None)` when a `Try` finds the name held. Cancel-safe:
/// a dropped call deletes its key in the background (and gives back a
/// lease of its own).
pub(crate) async fn acquire(
    core: &Arc<EtcdCore>,
    key_prefix: &str,
    request: &AcquireRequest,
) -> Result<Option<Acquired>, LockError> {
    let prefix = lock_prefix(key_prefix, &request.name);
    // This backend's own abandoned key under the prefix must not hold
    // this acquisition back.
    core.leaving
        .settled(&queue_line(&prefix), core.config.response_timeout)
        .await;
    let started = Instant::now();
    let mut requeues = Requeues::default();
    loop {
        requeues.next().await;
        let deadline = core.retry_deadline(request.wait);
        let (lease, name, own_lease) = hold_lease(core, &prefix, request, deadline).await?;
        let record = OwnerRecord::register(name.key(), &request.owner);
        let mut entry = Entry::armed(core, &prefix, name);
        let first = match put(core, &mut entry, &lease, request, deadline).await {
            Ok(first) => first,
            // Revoked or expired before the keepalive noticed: a new one.
            Err(error) if is_lease_not_found(&error) => {
                lease.gone();
                continue;
            }
            Err(error) => return Err(error),
        };
        record.created_at(entry.at.revision);
        let turn = match first {
            Some(revision) => Turn::Holder { revision },
            None if !request.wait.may_wait() => Turn::Busy,
            None => {
                let view = entry.at.check(core, deadline).await?;
                entry.at.wait_turn(core, &lease, view, request.wait).await?
            }
        };
        let decided_at = match turn {
            Turn::Holder { revision } => revision,
            Turn::Busy => {
                entry.withdraw(core).await?;
                if own_lease {
                    lease.revoke(core.retry_deadline(request.wait)).await;
                }
                return Ok(None);
            }
            Turn::Requeue => continue,
        };
        if !lease.register(request.loss.clone()) {
            continue;
        }
        let token = FencingToken::new(u64::try_from(entry.at.revision).unwrap_or(0));
        let held = HeldEntry::start(core, entry.into_key(), lease, request, decided_at)
            .foreign(ForeignHold { record, own_lease });
        return Ok(Some(Acquired {
            token,
            requested_at: started,
            renewal: Renewal::Managed,
            held: Box::new(held),
        }));
    }
}

/// The lease and key of this hold: the session lease if this backend has
/// no key on it under `prefix` yet, else a lease of the hold's own (true).
async fn hold_lease(
    core: &EtcdCore,
    prefix: &[u8],
    request: &AcquireRequest,
    deadline: Instant,
) -> Result<(Arc<Lease>, Arc<EntryName>, bool), LockError> {
    let session = core.sessions.lease(request.ttl, deadline).await?;
    if let Some(name) = core.names.try_reserve(entry_key(prefix, session.id())) {
        return Ok((session, name, false));
    }
    let own = core.sessions.own_lease(request.ttl, deadline).await?;
    match core.names.try_reserve(entry_key(prefix, own.id())) {
        Some(name) => Ok((own, name, true)),
        None => Err(LockError::Backend {
            message: format!(
                "etcd granted lease {:x}, whose key under {} this backend uses already",
                own.id(),
                String::from_utf8_lossy(prefix)
            ),
            source: None,
        }),
    }
}

/// Puts our key (if absent) with the request's value on `lease`, reading
/// the first-created key under the prefix in the same transaction; sets
/// the entry's create revision. `Some(revision)`: ours is the first, as
/// of `revision`.
async fn put(
    core: &EtcdCore,
    entry: &mut Entry,
    lease: &Lease,
    request: &AcquireRequest,
    deadline: Instant,
) -> Result<Option<i64>, LockError> {
    let key = entry.key().to_vec();
    let prefix = entry.at.prefix.clone();
    let first_created = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1)
        .with_keys_only();
    let put = PutOptions::new().with_lease(lease.id());
    // The key is reserved for this call, so "create if absent" makes a
    // retry after a lost reply harmless: the else branch finds the key
    // an earlier try made.
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([
            TxnOp::put(key.clone(), request.value.as_bytes(), Some(put)),
            TxnOp::get(prefix.clone(), Some(first_created.clone())),
        ])
        .or_else([
            TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
            TxnOp::get(prefix, Some(first_created)),
        ]);
    let response = run_txn(&core.client, deadline, "cannot queue for the lock", txn).await?;
    let revision = response.header().map_or(0, |h| h.revision());
    let mut ranges =
        range_reads(&response).map(|get| get.kvs().first().map(|kv| kv.create_revision()));
    if response.succeeded() {
        entry.at.revision = revision;
    } else {
        entry.at.revision = ranges.next().flatten().unwrap_or(0);
    }
    let first = ranges.next().flatten();
    Ok((first == Some(entry.at.revision)).then_some(revision))
}
