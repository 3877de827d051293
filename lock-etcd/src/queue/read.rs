//! A reader's turn: it holds the lock once no writer's entry is ahead of
//! its own. Writers are every entry whose name lacks the reader mark
//! (plain locks and leaderships included); readers ahead of it do not
//! matter, so readers hold together, and a reader that came after a
//! waiting writer waits behind it.
//!
//! A waiting reader watches one entry: the nearest writer ahead of it,
//! whose deletion is what can let it in. Readers between two writers all
//! watch the same one and are let in together when it goes; a release by
//! a reader wakes no reader.

use std::time::Instant;

use etcd_client::{GetOptions, KeyValue, SortOrder, SortTarget};
use lock_core::backend::WaitMode;
use lock_core::LockError;
use tokio::sync::{mpsc, watch};

use super::turn::{watch_deletion, Position, Turn};
use crate::client::with_retries;
use crate::core::EtcdCore;
use crate::keys;
use crate::session::Lease;
use crate::watch::Fired;

/// What a read of the entries up to ours showed, as of `revision`.
struct ReadView {
    revision: i64,
    own_exists: bool,
    /// The nearest writer's entry ahead of ours.
    writer_ahead: Option<Vec<u8>>,
}

impl Position {
    /// Waits until no writer is ahead of our (reader's) entry, or for
    /// `Try` says one is.
    pub(super) async fn wait_read_turn(
        &self,
        core: &EtcdCore,
        lease: &Lease,
        wait: WaitMode,
    ) -> Result<Turn, LockError> {
        let mut lease_lost = lease.lost_signal();
        let mut view = self
            .read_ahead(core, None, core.retry_deadline(wait))
            .await?;
        loop {
            if !view.own_exists || lease.is_lost() {
                return Ok(Turn::Requeue);
            }
            let Some(writer) = view.writer_ahead.take() else {
                return Ok(Turn::Holder {
                    revision: view.revision,
                });
            };
            if !wait.may_wait() {
                return Ok(Turn::Busy);
            }
            let (mut fired, _watch) = watch_deletion(core, &writer, view.revision);
            let Some(at) = next_read(&mut fired, view.revision, &mut lease_lost).await? else {
                return Ok(Turn::Requeue);
            };
            view = self.read_ahead(core, at, core.retry_deadline(wait)).await?;
        }
    }

    async fn read_ahead(
        &self,
        core: &EtcdCore,
        at: Option<i64>,
        deadline: Instant,
    ) -> Result<ReadView, LockError> {
        let (entries, revision) = self.read_up_to_own(core, at, deadline).await?;
        Ok(self.read_view(&entries, revision))
    }

    /// Every entry created no later than ours, newest first, keys only, and
    /// the revision read at; serializable as of revision `at` if given
    /// (exact without a round through the leader; a member that cannot
    /// serve it is asked linearizably instead), else linearizable.
    pub(super) async fn read_up_to_own(
        &self,
        core: &EtcdCore,
        at: Option<i64>,
        deadline: Instant,
    ) -> Result<(Vec<KeyValue>, i64), LockError> {
        let read = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_max_create_revision(self.revision)
            .with_keys_only();
        if let Some(revision) = at {
            let mut kv = core.client.kv_client();
            let exact = read.clone().with_serializable().with_revision(revision);
            if let Ok(response) = kv.get(self.prefix.clone(), Some(exact)).await {
                return Ok((response.kvs().to_vec(), revision));
            }
        }
        let response = with_retries(deadline, "cannot read the queue", || {
            let mut kv = core.client.kv_client();
            let (prefix, read) = (self.prefix.clone(), read.clone());
            async move { kv.get(prefix, Some(read)).await }
        })
        .await?;
        let revision = response.header().map_or(0, |h| h.revision());
        Ok((response.kvs().to_vec(), revision))
    }

    fn read_view(&self, entries: &[KeyValue], revision: i64) -> ReadView {
        let own_exists = entries
            .first()
            .is_some_and(|entry| entry.create_revision() == self.revision);
        let writer_ahead = entries
            .iter()
            .filter(|entry| entry.create_revision() < self.revision)
            .find(|entry| !keys::is_reader(entry.key()))
            .map(|entry| entry.key().to_vec());
        ReadView {
            revision,
            own_exists,
            writer_ahead,
        }
    }
}

/// Waits on `fired` (deletion watches set after a read at revision
/// `read_at`) for what calls for a new read: `Some(Some(r))` to read at
/// revision `r` (a deletion, or a watch that started later than the
/// read), `Some(None)` to read afresh (history compacted, or the watches
/// gone), `None` if the session's lease was lost meanwhile.
pub(super) async fn next_read(
    fired: &mut mpsc::UnboundedReceiver<Fired>,
    read_at: i64,
    lease_lost: &mut watch::Receiver<bool>,
) -> Result<Option<Option<i64>>, LockError> {
    loop {
        tokio::select! {
            event = fired.recv() => match event {
                // Nothing written since our read.
                Some(Fired::Created { revision }) if revision <= read_at => {}
                Some(Fired::Created { revision } | Fired::Deleted { revision }) => {
                    return Ok(Some(Some(revision)))
                }
                Some(Fired::Refused(reason)) => {
                    return Err(LockError::Backend {
                        message: format!("etcd refused to watch the lock queue: {reason}"),
                        source: None,
                    })
                }
                Some(Fired::Compacted) | None => return Ok(Some(None)),
            },
            _ = lease_lost.wait_for(|lost| *lost) => return Ok(None),
        }
    }
}
