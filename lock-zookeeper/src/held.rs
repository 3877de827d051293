//! A held ZooKeeper lock, read lock or permit: our node in its queue.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::backend::{async_trait, HeldLock};
use lock_core::{LockError, LossReason, OwnerId};
use zookeeper_client::Error as ZkError;

use crate::curator::owners::Registered;
use crate::error::{self, outcome_unknown};
use crate::layout::Layout;
use crate::session::Session;
use crate::watch::NodeWatch;

/// Keeps the session (and so the node) alive while the guard lives; the
/// node watch reports the lock lost if the node is deleted from outside.
#[derive(Debug)]
pub(crate) struct ZkHeld {
    session: Arc<Session>,
    /// The owner id our node's data starts with.
    owner: OwnerId,
    /// Our node. Its path carries our contender id and ZooKeeper's
    /// sequence number, and it is an ephemeral node of our session: while
    /// it exists it is ours and holds the lock, so writes to it need no
    /// version check.
    path: String,
    watch: NodeWatch,
    /// Whether the release marks the node before deleting it: only an
    /// exclusive lock that had to wait does (readers and permits never:
    /// nobody reads a mark from their nodes). Whoever queued behind a lock found free
    /// at once almost always saw it at the head of the queue, so its plain
    /// deletion already tells them that they are next; in the rare case it
    /// does not, it costs them a listing. Either way is safe.
    marked: bool,
    /// When the request that took the lock was sent: the session was alive
    /// on the server after it.
    requested_at: Instant,
    /// How the node's data is written.
    layout: Layout,
    /// Our owner id, for readers of this process, while we hold (layouts
    /// whose nodes do not store it).
    _registered: Option<Registered>,
}

impl ZkHeld {
    /// The hold kept by node `path`; `marked` says whether its release
    /// marks the node (see [`ZkHeld::marked`]).
    pub(crate) fn new(
        session: Arc<Session>,
        owner: OwnerId,
        path: String,
        watch: NodeWatch,
        marked: bool,
        requested_at: Instant,
    ) -> Self {
        Self {
            session,
            owner,
            path,
            watch,
            marked,
            requested_at,
            layout: Layout::Distlock,
            _registered: None,
        }
    }

    /// The same hold, its node written as `layout` writes it, with the
    /// owner registration it keeps while it lives.
    pub(crate) fn in_layout(mut self, layout: Layout, registered: Option<Registered>) -> Self {
        self.layout = layout;
        self._registered = registered;
        self
    }

    fn lost(&self, reason: LossReason) -> LockError {
        LockError::lost(self.path.clone(), reason)
    }

    /// Deletes our node, `marked`: in one transaction with a write to it
    /// first. The write fires the watch of the waiter behind us as a data
    /// change, which tells it that we held the lock (only a holder writes
    /// its node: this mark, or a new value); a node deleted without one
    /// was a waiter giving up, or a lock taken away.
    async fn delete(&self, marked: bool) -> Result<(), ZkError> {
        let client = self.session.client();
        if !marked {
            return client.delete(&self.path, None).await;
        }
        let mut transaction = client.new_multi_writer();
        transaction.add_set_data(&self.path, &[], None)?;
        transaction.add_delete(&self.path, None)?;
        transaction.commit().await.map(drop).map_err(ZkError::from)
    }

    /// Why the node is gone: the session ended, or someone deleted it.
    fn gone_reason(&self) -> LossReason {
        if self.session.has_ended() {
            LossReason::SessionExpired
        } else {
            LossReason::TakenAway
        }
    }

    /// What a request on our node that failed for good means: the node
    /// gone or the session over, [`LockError::Lost`]; anything else, the
    /// store's error for `what` (`delete`, `write`) on our node.
    fn failure(&self, what: &str, e: ZkError) -> LockError {
        match e {
            ZkError::NoNode => self.lost(self.gone_reason()),
            ZkError::SessionExpired | ZkError::ClientClosed => {
                self.lost(LossReason::SessionExpired)
            }
            e => error::map(&format!("{what} {}", self.path), e),
        }
    }
}

#[async_trait]
impl HeldLock for ZkHeld {
    /// The session heartbeat keeps the lock; this only checks that our node
    /// still stands.
    async fn renew(&self, _ttl: Duration) -> Result<(), LockError> {
        if self.watch.is_gone() {
            return Err(self.lost(self.gone_reason()));
        }
        let client = self.session.client();
        match self.session.request(client.check_stat(&self.path)).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(self.lost(self.gone_reason())),
            Err(ZkError::SessionExpired | ZkError::ClientClosed) => {
                Err(self.lost(LossReason::SessionExpired))
            }
            Err(e) => Err(error::map(&format!("check {}", self.path), e)),
        }
    }

    /// Deletes our node, which wakes the next waiter: after a wait, marked
    /// released in the same transaction (see [`crate::ahead`]). A node
    /// already gone means the lock was not ours any more:
    /// [`LockError::Lost`].
    async fn release(&self) -> Result<(), LockError> {
        self.watch.releasing();
        let mut marked = self.marked;
        let mut retried = false;
        loop {
            match self.session.request(self.delete(marked)).await {
                Ok(()) => return Ok(()),
                // Our node refuses writes (an operator changed its ACL): a
                // plain delete wakes the next waiter all the same, which
                // then lists the queue.
                Err(ZkError::NoAuth) if marked => marked = false,
                // Our first delete was applied; its reply was lost.
                Err(ZkError::NoNode) if retried => return Ok(()),
                Err(e) if outcome_unknown(&e) && !retried => {
                    retried = true;
                    self.session.ready().await?;
                }
                Err(e) => return Err(self.failure("delete", e)),
            }
        }
    }

    /// Writes `value` to our node (with the owner id in this crate's
    /// layout, see [`crate::value`]), which fires the watches of observers and of the
    /// waiter behind us. A node already gone means the lock was not ours
    /// any more: [`LockError::Lost`], nothing written.
    async fn set_value(&self, value: &str) -> Result<(), LockError> {
        if self.watch.is_gone() {
            return Err(self.lost(self.gone_reason()));
        }
        let data = self.layout.node_data(self.owner.as_str(), value);
        let mut retried = false;
        loop {
            let write = self.session.client().set_data(&self.path, &data, None);
            match self.session.request(write).await {
                Ok(_) => return Ok(()),
                // The same write again is harmless if the first was applied.
                Err(e) if outcome_unknown(&e) && !retried => {
                    retried = true;
                    self.session.ready().await?;
                }
                Err(e) => return Err(self.failure("write", e)),
            }
        }
    }

    /// Until when the server surely keeps our session (and so our node):
    /// past it, ZooKeeper may have expired the session and given the lock
    /// to another.
    fn valid_until(&self) -> Option<Instant> {
        Some(self.session.surely_alive_until(self.requested_at))
    }
}
