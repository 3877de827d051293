//! A held ZooKeeper lock: our node at the head of the queue.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{async_trait, HeldLock, LockError, LossReason};
use zookeeper_client::Error as ZkError;

use crate::error::{self, outcome_unknown};
use crate::session::Session;
use crate::watch::NodeWatch;

/// The version our node has: its data (the owner id) is never changed.
const NODE_VERSION: i32 = 0;

/// Keeps the session (and so the node) alive while the guard lives; the
/// node watch reports the lock lost if the node is deleted from outside.
#[derive(Debug)]
pub(crate) struct ZkHeld {
    session: Arc<Session>,
    path: String,
    watch: NodeWatch,
}

impl ZkHeld {
    pub(crate) fn new(session: Arc<Session>, path: String, watch: NodeWatch) -> Self {
        Self {
            session,
            path,
            watch,
        }
    }

    fn lost(&self, reason: LossReason) -> LockError {
        LockError::lost(self.path.clone(), reason)
    }

    /// Why the node is gone: the session ended, or someone deleted it.
    fn gone_reason(&self) -> LossReason {
        if self.session.has_ended() {
            LossReason::SessionExpired
        } else {
            LossReason::TakenAway
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

    /// Deletes our node, only in the version we created, which wakes the
    /// next waiter. A node already gone means the lock was not ours any
    /// more: [`LockError::Lost`].
    async fn release(&self) -> Result<(), LockError> {
        self.watch.releasing();
        let client = self.session.client();
        let mut retried = false;
        loop {
            match self
                .session
                .request(client.delete(&self.path, Some(NODE_VERSION)))
                .await
            {
                Ok(()) => return Ok(()),
                // Our first delete was applied; its reply was lost.
                Err(ZkError::NoNode) if retried => return Ok(()),
                Err(ZkError::NoNode | ZkError::BadVersion) => {
                    return Err(self.lost(self.gone_reason()))
                }
                Err(ZkError::SessionExpired | ZkError::ClientClosed) => {
                    return Err(self.lost(LossReason::SessionExpired))
                }
                Err(e) if outcome_unknown(&e) && !retried => {
                    retried = true;
                    self.session.ready().await?;
                }
                Err(e) => return Err(error::map(&format!("delete {}", self.path), e)),
            }
        }
    }
}
