//! [`ZkBackend`]: the [`Backend`] implementation.

use std::fmt;
use std::sync::Arc;

use lock_core::backend::Capability::{Expiry, Fifo, ForceRelease, NotifiedWakeups, Remote};
use lock_core::backend::{
    async_trait, holder_stream, AcquireRequest, Acquired, Backend, Capabilities, HolderStream,
};
use lock_core::{LockError, LockInfo, LockName};
use zookeeper_client::Error as ZkError;

use crate::config::ZkConfig;
use crate::names::{lock_dir, queue};
use crate::observe::HolderNodes;
use crate::session::Sessions;
use crate::value::lock_info;
use crate::{error, queue as lock_queue, tls};

/// How often `inspect`, `force_release` and a watch look again when the
/// node they picked vanished under them.
pub(crate) const RACE_RETRIES: usize = 5;

/// Locks in a ZooKeeper ensemble; see the crate docs.
///
/// Opens one session lazily, on first use, and a new one after the old
/// one expired. Cheap to share (`Arc`); `Debug` shows no password.
pub struct ZkBackend {
    config: Arc<ZkConfig>,
    /// Shared with the watches made by [`Backend::watch`].
    sessions: Arc<Sessions>,
}

impl ZkBackend {
    /// A backend for `config`. Connects on first use; fails only if the
    /// configuration cannot work (TLS asked for but not compiled in, or
    /// unreadable TLS files).
    pub fn new(config: ZkConfig) -> Result<Self, LockError> {
        tls::check(&config)?;
        let config = Arc::new(config);
        Ok(Self {
            sessions: Arc::new(Sessions::new(Arc::clone(&config))),
            config,
        })
    }

    /// The configuration this backend was made from.
    pub fn config(&self) -> &ZkConfig {
        &self.config
    }

    /// The contenders directory of lock `name`: its children are the
    /// queue, the lowest sequence holds the lock.
    fn lock_dir(&self, name: &LockName) -> String {
        lock_dir(&self.config.base, name)
    }

    /// The holder's node (full path) and its data and czxid, if any, as of
    /// this call: every lock taken before it (by any session) is seen.
    async fn holder(&self, name: &LockName) -> Result<Option<(String, Vec<u8>, i64)>, LockError> {
        let session = self.sessions.get().await?;
        let dir = self.lock_dir(name);
        // Reads are served by the server this session is connected to,
        // which may lag behind the leader: a lock another session just
        // took would look free. `sync` makes the server catch up first.
        session
            .request(session.client().sync("/"))
            .await
            .map_err(|e| error::map("sync with the leader", e))?;
        for _ in 0..RACE_RETRIES {
            let children = lock_queue::list(&session, &dir).await?;
            let Some(first) = queue(&children).into_iter().next() else {
                return Ok(None);
            };
            let path = format!("{dir}/{}", first.name);
            match session.request(session.client().get_data(&path)).await {
                Ok((data, stat)) => return Ok(Some((path, data, stat.czxid))),
                // Released between the listing and the read: look again.
                Err(ZkError::NoNode) => continue,
                Err(e) => return Err(error::map(&format!("read {path}"), e)),
            }
        }
        Err(LockError::Unavailable {
            message: format!("the holder of {dir} kept changing while being read"),
            source: None,
        })
    }
}

#[async_trait]
impl Backend for ZkBackend {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn capabilities(&self) -> Capabilities {
        // Locks live as long as the session, which the client keeps alive:
        // a guard that stops "renewing" keeps its lock (no per_lock_expiry).
        Capabilities::of(&[Expiry, ForceRelease, NotifiedWakeups, Fifo, Remote])
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Option<Acquired>, LockError> {
        let session = self.sessions.get().await?;
        // Before the node exists, so that no expiry can slip in between.
        session.register(request.loss.clone());
        lock_queue::acquire(&session, &self.lock_dir(&request.name), request).await
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<LockInfo>, LockError> {
        Ok(self
            .holder(name)
            .await?
            .map(|(_, data, czxid)| lock_info(&data, czxid)))
    }

    /// Watches the holder's node (its value changes and its deletion), or
    /// the contenders directory while the lock is free, re-reading the
    /// holder on every notification (see the crate docs).
    fn watch(&self, name: &LockName) -> HolderStream {
        holder_stream(HolderNodes::new(
            Arc::clone(&self.sessions),
            self.lock_dir(name),
        ))
    }

    async fn force_release(&self, name: &LockName) -> Result<bool, LockError> {
        let session = self.sessions.get().await?;
        for _ in 0..RACE_RETRIES {
            let Some((path, _, _)) = self.holder(name).await? else {
                return Ok(false);
            };
            match session.request(session.client().delete(&path, None)).await {
                Ok(()) => return Ok(true),
                Err(ZkError::NoNode) => continue,
                Err(e) => return Err(error::map(&format!("delete {path}"), e)),
            }
        }
        Ok(false)
    }
}

impl fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkBackend")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
