//! [`DeleteOnDrop`]: a dropped acquire's node, deleted at once.

use std::sync::Arc;

use lock_core::backend::spawn_detached;
use tokio::runtime::Handle;
use zookeeper_client::Error as ZkError;

use crate::session::Session;

/// Deletes a queued node when dropped armed (a dropped or timed-out
/// acquire). The delete is *sent* in `drop`, not in a task spawned by it:
/// ZooKeeper answers a session's requests in order, so any request this
/// session sends next (say, the same locker trying again at once) already
/// sees the node gone. Only its reply is awaited in the background, with
/// the session kept open until it comes.
#[derive(Debug)]
pub(crate) struct DeleteOnDrop {
    session: Arc<Session>,
    path: String,
    armed: bool,
    /// The runtime the acquire ran on, for a drop outside any runtime.
    fallback: Option<Handle>,
}

impl DeleteOnDrop {
    /// Deletes `path` through `session` when dropped, unless disarmed.
    pub(crate) fn new(session: Arc<Session>, path: String) -> Self {
        Self {
            session,
            path,
            armed: true,
            fallback: Handle::try_current().ok(),
        }
    }

    /// The node is no longer ours to delete (it holds, or it is gone).
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let delete = self.session.client().delete(&self.path, None);
        let path = std::mem::take(&mut self.path);
        let session = Arc::clone(&self.session);
        spawn_detached(self.fallback.as_ref(), async move {
            let deleted = delete.await;
            drop(session);
            if let Err(e) = deleted {
                if e != ZkError::NoNode {
                    tracing::debug!(%e, path, "distlock: could not withdraw from the queue; the session's end will");
                }
            }
        });
    }
}
