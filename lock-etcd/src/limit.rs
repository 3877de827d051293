//! A semaphore's stored limit, `<key>%limit` beside its queue of permit
//! entries: checked (or stored, when nobody is queued) before an entry
//! queues, and deleted with the last permit given back, so a semaphore
//! nobody uses leaves no key behind.

use std::time::Instant;

use etcd_client::{Compare, CompareOp, GetOptions, GetResponse, Txn, TxnOp};
use lock_core::{LockError, LockName};

use crate::client::{range_reads, run_txn};
use crate::core::EtcdCore;
use crate::keys;

/// Checks `limit` against the semaphore's stored limit while any entry
/// is queued, and stores it when none is.
pub(crate) async fn check_limit(
    core: &EtcdCore,
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
    let response = run_txn(&core.client, deadline, "cannot read the semaphore", txn).await?;
    if response.succeeded() {
        return Ok(());
    }
    let mut ranges = range_reads(&response);
    let stored = stored_limit(ranges.next());
    let queued = ranges.next().map_or(0, |get| get.count());
    if let Some(stored) = stored.filter(|_| queued > 0) {
        return Err(LockError::LimitMismatch {
            key: name.key().to_string(),
            stored,
            asked: limit,
        });
    }
    let mut kv = core.client.kv_client();
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
    core: &EtcdCore,
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
    run_txn(&core.client, deadline, context, txn).await?;
    Ok(())
}

/// The limit a read of a semaphore's `<key>%limit` found, if any.
pub(crate) fn stored_limit(read: Option<GetResponse>) -> Option<u32> {
    read.and_then(|get| get.kvs().first().map(|kv| kv.value().to_vec()))
        .and_then(|value| String::from_utf8(value).ok()?.parse::<u32>().ok())
}
