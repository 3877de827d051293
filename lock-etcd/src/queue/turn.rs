//! Waiting for our entry's turn: reads of the queue and deletion watches
//! on the entries ahead of ours. A writer's turn is here; a reader's is in
//! `read`, a permit's in `permit`.

use std::time::Instant;

use etcd_client::{GetOptions, KeyValue, SortOrder, SortTarget};
use lock_core::backend::WaitMode;
use lock_core::LockError;
use tokio::sync::{mpsc, watch};

use crate::client::with_retries;
use crate::core::EtcdCore;
use crate::session::Lease;
use crate::watch::{Fired, WatchGuard};

/// How a wait for our entry's turn ended.
pub(crate) enum Turn {
    /// Our entry holds, as of `revision`.
    Holder { revision: i64 },
    /// A `Try` found the lock held.
    Busy,
    /// Our entry or its lease vanished: queue again.
    Requeue,
}

/// What a read of the queue showed, as of `revision`.
pub(crate) struct View {
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

/// Reads at most `limit` keys, keys only, newest first by create revision.
pub(super) fn newest_first(limit: i64) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(limit)
        .with_keys_only()
}

/// Where our entry is (its key is the entry's name).
pub(crate) struct Position {
    pub(crate) prefix: Vec<u8>,
    /// The entry's create revision.
    pub(crate) revision: i64,
}

impl Position {
    /// Reads, linearizably, whether our entry still exists and which entry
    /// precedes it.
    pub(crate) async fn check(
        &self,
        core: &EtcdCore,
        deadline: Instant,
    ) -> Result<View, LockError> {
        let read = self.check_read(None);
        let response = with_retries(deadline, "cannot read the lock queue", || {
            let mut kv = core.client.kv_client();
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
        core: &EtcdCore,
        revision: i64,
        deadline: Instant,
    ) -> Result<View, LockError> {
        let mut kv = core.client.kv_client();
        match kv
            .get(self.prefix.clone(), Some(self.check_read(Some(revision))))
            .await
        {
            Ok(response) => Ok(self.view(response.kvs(), revision)),
            Err(_) => self.check(core, deadline).await,
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
    pub(super) fn view(&self, entries: &[KeyValue], revision: i64) -> View {
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
    pub(crate) async fn wait_turn(
        &self,
        core: &EtcdCore,
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
                self.wait_for_deletion(core, lease, predecessor, view, &mut lease_lost, wait);
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
    ///
    /// [`HeldEntry::start`]: crate::held::HeldEntry::start
    async fn wait_for_deletion(
        &self,
        core: &EtcdCore,
        lease: &Lease,
        predecessor: Ahead,
        mut view: View,
        lease_lost: &mut watch::Receiver<bool>,
        wait: WaitMode,
    ) -> Result<Option<View>, LockError> {
        let (mut predecessor_fired, _predecessor_watch) =
            watch_deletion(core, &predecessor.key, view.revision);
        let mut second = view
            .second
            .as_ref()
            .map(|key| watch_deletion(core, key, view.revision));
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
            let ours =
                about_predecessor && view.second.is_none() && predecessor.lease != lease.id();
            let next = match self.after(core, &view, event, ours, wait).await? {
                Seen::Nothing => continue,
                // At the head as of `view`, and now gone: ours.
                Seen::Ours => {
                    return Ok(Some(View {
                        predecessor: None,
                        ..view
                    }))
                }
                Seen::Read(next) => next,
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
                    .map(|key| watch_deletion(core, key, next.revision));
            }
            view = next;
        }
    }

    /// What `event`, from a watch set after `view`, tells: nothing new,
    /// the lock ours (`deleted_is_ours`: the event is the deletion of a
    /// predecessor that was at the head, on another lease), or the queue
    /// as read since.
    async fn after(
        &self,
        core: &EtcdCore,
        view: &View,
        event: Option<Fired>,
        deleted_is_ours: bool,
        wait: WaitMode,
    ) -> Result<Seen, LockError> {
        let deadline = core.retry_deadline(wait);
        let next = match event {
            // Nothing was written since our read: nothing to check.
            Some(Fired::Created { revision }) if revision <= view.revision => {
                return Ok(Seen::Nothing)
            }
            Some(Fired::Deleted { .. }) if deleted_is_ours => return Ok(Seen::Ours),
            // The watch starts at `revision`: what happened before it
            // must be read. Or a deletion: read the queue as of it.
            Some(Fired::Created { revision } | Fired::Deleted { revision }) => {
                self.check_at(core, revision, deadline).await?
            }
            Some(Fired::Refused(reason)) => {
                return Err(LockError::Backend {
                    message: format!("etcd refused to watch the lock queue: {reason}"),
                    source: None,
                })
            }
            // Compacted history, or the hub went away: read afresh.
            Some(Fired::Compacted) | None => self.check(core, deadline).await?,
        };
        Ok(Seen::Read(next))
    }
}

/// What an event of a watch on the entries ahead of ours tells.
enum Seen {
    /// Nothing was written since the latest read.
    Nothing,
    /// The predecessor, at the head, is gone: the lock is ours.
    Ours,
    /// The queue as read after the event.
    Read(View),
}

/// A deletion watch on `key` after revision `after`, on the backend's hub,
/// and the channel its events arrive on.
pub(super) fn watch_deletion(
    core: &EtcdCore,
    key: &[u8],
    after: i64,
) -> (mpsc::UnboundedReceiver<Fired>, WatchGuard) {
    let (fired_tx, fired) = mpsc::unbounded_channel();
    (fired, watch_deletion_into(core, key, after, fired_tx))
}

/// A deletion watch on `key` after revision `after` whose events go to
/// `fired` (which several watches may share).
pub(super) fn watch_deletion_into(
    core: &EtcdCore,
    key: &[u8],
    after: i64,
    fired: mpsc::UnboundedSender<Fired>,
) -> WatchGuard {
    core.hub.watch_deletion(
        key.to_vec(),
        after,
        Box::new(move |event| {
            let _ = fired.send(event);
        }),
    )
}
