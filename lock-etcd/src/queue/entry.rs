//! Our entry in the lock's queue: put with a read of the entries before
//! it, withdrawn after a failed `try_lock`, deleted if abandoned.

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnResponse};
use lock_core::backend::{AcquireRequest, CleanupOnDrop, Pending, WaitMode};
use lock_core::{HoldKind, LockError};

use super::turn::{newest_first, Position, View};
use crate::client::{delete_key, range_reads, run_txn, with_retries};
use crate::core::EtcdCore;
use crate::keys;
use crate::names::EntryName;
use crate::session::Lease;
use crate::value;

/// Our entry in the queue; deleted in the background if dropped armed.
pub(crate) struct Entry {
    pub(crate) at: Position,
    name: Arc<EntryName>,
    cleanup: CleanupOnDrop,
}

impl Entry {
    /// Puts our entry and reads the two entries before it, in one
    /// transaction.
    pub(super) async fn enqueue(
        core: &Arc<EtcdCore>,
        prefix: &[u8],
        lease: &Lease,
        request: &AcquireRequest,
    ) -> Result<(Self, View), LockError> {
        let mark = match request.kind {
            HoldKind::Shared => keys::READER_MARK,
            _ => "",
        };
        let name = core.names.reserve_marked(prefix, lease.id(), mark);
        let key = name.key().to_vec();
        let mut entry = Self::armed(core, prefix, name);
        let put = PutOptions::new().with_lease(lease.id());
        // The name is reserved for this call, so "create if absent" makes a
        // retry after a lost reply harmless: the else branch finds the
        // entry we made.
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(
                    key.clone(),
                    value::encode(request.owner.as_str(), &request.value),
                    Some(put),
                ),
                TxnOp::get(prefix.to_vec(), Some(newest_first(3))),
            ])
            .or_else([TxnOp::get(
                key.clone(),
                Some(GetOptions::new().with_keys_only()),
            )]);
        let deadline = core.retry_deadline(request.wait);
        let response = run_txn(&core.client, deadline, "cannot queue for the lock", txn).await?;
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
        let view = entry.at.check(core, deadline).await?;
        Ok((entry, view))
    }

    /// Our entry under `prefix`, named `name`, before its put is sent:
    /// armed from now on, so that a call dropped while the put's reply is
    /// in flight deletes whatever the put made. Its create revision is
    /// unknown (0) until the put's answer sets it.
    pub(crate) fn armed(core: &Arc<EtcdCore>, prefix: &[u8], name: Arc<EntryName>) -> Self {
        let cleanup = {
            let (core, name) = (Arc::clone(core), Arc::clone(&name));
            let line = queue_line(prefix);
            CleanupOnDrop::new(move || {
                // Counted at the drop itself, before the next attempt looks.
                let under_way = core.leaving.start(&line);
                delete_entry(core, name, under_way)
            })
        };
        Self {
            at: Position {
                prefix: prefix.to_vec(),
                revision: 0,
            },
            name,
            cleanup,
        }
    }

    /// The entry's key.
    pub(crate) fn key(&self) -> &[u8] {
        self.name.key()
    }

    /// Deletes our entry after a failed `try_lock`, and disarms the clean-up.
    pub(crate) async fn withdraw(self, core: &EtcdCore) -> Result<(), LockError> {
        let deadline = core.retry_deadline(WaitMode::Try);
        let key = self.name.key();
        let done = delete_key(&core.client, key, "cannot leave the lock queue", deadline).await?;
        self.cleanup.disarm();
        // A retried delete may still have a try in flight: keep the name.
        if done.first_answered {
            self.name.mark_gone();
        }
        Ok(())
    }

    /// The entry's name and create revision, now the holder's: no clean-up.
    pub(crate) fn into_key(self) -> (Arc<EntryName>, i64) {
        self.cleanup.disarm();
        (self.name, self.at.revision)
    }
}

/// Deletes a queue entry whose acquire was abandoned. If nothing was
/// there, the put may still be in flight on another stream of the same
/// connection (etcd handles each request on its own): delete once more a
/// little later, which is harmless since the name stays reserved for this
/// call until then.
///
/// The deletion counts as under way on its queue (`under_way`) until its
/// first delete is answered.
async fn delete_entry(core: Arc<EtcdCore>, name: Arc<EntryName>, under_way: Pending) {
    const SECOND_TRY_AFTER: Duration = Duration::from_millis(250);
    let key = name.key().to_vec();
    let delete = || {
        let deadline = Instant::now() + core.config.response_timeout;
        with_retries(deadline, "cannot delete an abandoned queue entry", || {
            let mut kv = core.client.kv_client();
            let key = key.clone();
            async move { kv.delete(key, None).await }
        })
    };
    let first = delete().await;
    drop(under_way);
    match first {
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

/// The name of the queue under `prefix` in the backend's
/// [`Leaving`](lock_core::backend::Leaving).
pub(crate) fn queue_line(prefix: &[u8]) -> String {
    String::from_utf8_lossy(prefix).into_owned()
}

/// The revision of the store when the transaction ran.
fn header_revision(response: &TxnResponse) -> i64 {
    response.header().map_or(0, |h| h.revision())
}

/// The entries the first range read of a transaction found.
fn first_range(response: &TxnResponse) -> Vec<KeyValue> {
    range_reads(response)
        .next()
        .map(|get| get.kvs().to_vec())
        .unwrap_or_default()
}
