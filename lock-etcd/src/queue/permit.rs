//! A semaphore's queue: entries under `<key>%permits/`, ordered by create
//! revision; the first `limit` hold a permit. The limit is stored beside
//! the queue (`<key>%limit`, see [`crate::limit`]).
//!
//! A waiter can be let in only by the deletion of one of the `limit`
//! entries just ahead of it: while all of them stand, at least `limit`
//! entries are older than it. So it watches exactly those (on the
//! backend's shared watch stream) and reads the queue again when one goes.
//! A release therefore wakes the waiters that have the released entry
//! among their `limit` nearest: the first waiter when the oldest holder
//! leaves, at most `limit` waiters otherwise, each making one read.

use std::time::Instant;

use etcd_client::KeyValue;
use lock_core::backend::WaitMode;
use lock_core::LockError;
use tokio::sync::mpsc;

use super::read::next_read;
use super::turn::{watch_deletion_into, Position, Turn};
use crate::core::EtcdCore;
use crate::session::Lease;
use crate::watch::WatchGuard;

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
        core: &EtcdCore,
        lease: &Lease,
        limit: u32,
        wait: WaitMode,
    ) -> Result<Turn, LockError> {
        let limit = limit as usize;
        let mut lease_lost = lease.lost_signal();
        let mut view = self
            .read_permits(core, None, core.retry_deadline(wait))
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
                .map(|key| watch_deletion_into(core, key, view.revision, fired_tx.clone()))
                .collect();
            let Some(at) = next_read(&mut fired, view.revision, &mut lease_lost).await? else {
                return Ok(Turn::Requeue);
            };
            view = self
                .read_permits(core, at, core.retry_deadline(wait))
                .await?;
        }
    }

    async fn read_permits(
        &self,
        core: &EtcdCore,
        at: Option<i64>,
        deadline: Instant,
    ) -> Result<PermitView, LockError> {
        let (entries, revision) = self.read_up_to_own(core, at, deadline).await?;
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
