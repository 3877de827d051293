//! [`ZkBackend`]: the [`Backend`] implementation.

use std::fmt;
use std::sync::Arc;

use lock_core::backend::Capability::{
    Expiry, Fifo, ForceRelease, NotifiedWakeups, Remote, Semaphores, SharedLocks,
};
use lock_core::backend::{
    async_trait, holder_stream, AcquireRequest, Acquired, Backend, Capabilities, HoldKind,
    HolderStream, Primitive,
};
use lock_core::{LockError, LockInfo, LockName, Namespace};
use zookeeper_client::Error as ZkError;

use crate::acquire::acquire;
use crate::config::ZkConfig;
use crate::curator::queue::RecipeQueue;
use crate::holders::{holders, HolderNode, Object, RACE_RETRIES};
use crate::layout::Layout;
use crate::locks::LockQueue;
use crate::names::{lock_dir, namespace_dir, permits_dir};
use crate::observe::HolderNodes;
use crate::permits::PermitQueue;
use crate::session::Session;
use crate::sessions::Sessions;
use crate::{curator, error, purge, tls};

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
    /// queue, the first in line holds the lock.
    fn lock_dir(&self, name: &LockName) -> String {
        match self.config.layout {
            Layout::Curator => curator::object_path(&self.config.base, name),
            _ => lock_dir(&self.config.base, name),
        }
    }

    /// The holders of `name`'s lock (the exclusive holder, or every
    /// reader), as of this call.
    async fn lock_holders(&self, name: &LockName) -> Result<Vec<HolderNode>, LockError> {
        let session = self.sessions.get().await?;
        let object = Object::Lock(self.config.layout);
        holders(&session, &self.lock_dir(name), object).await
    }

    /// Takes what `request` asks for in Curator's layout.
    async fn acquire_curator(
        &self,
        session: &Arc<Session>,
        request: &AcquireRequest,
    ) -> Result<Option<Acquired>, LockError> {
        let dir = self.lock_dir(&request.name);
        match (
            request.kind,
            RecipeQueue::for_taking(session, &dir, request.taking).await?,
        ) {
            (HoldKind::Permit { limit }, _) => {
                curator::semaphore::acquire(session, request, &dir, limit).await
            }
            (_, Some(queue)) => acquire(session, request, &queue).await,
            (_, None) => Err(LockError::not_supported(self.name(), "this kind of hold")),
        }
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
        match self.config.layout {
            // Keys are Curator's paths, whatever the namespace.
            Layout::Curator => Capabilities::of(&[
                Expiry,
                ForceRelease,
                NotifiedWakeups,
                Fifo,
                Remote,
                SharedLocks,
                Semaphores,
            ]),
            _ => Capabilities::QUEUEING_STORE.with(&[Remote]),
        }
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Option<Acquired>, LockError> {
        let session = self.sessions.get().await?;
        // Before the node exists, so that no expiry can slip in between.
        session.register(request.loss.clone());
        if self.config.layout == Layout::Curator {
            return self.acquire_curator(&session, request).await;
        }
        match request.kind {
            HoldKind::Permit { limit } => {
                let dir = permits_dir(&self.config.base, &request.name);
                let permits = PermitQueue::new(&dir, limit, &request.name);
                acquire(&session, request, &permits).await
            }
            kind => {
                let dir = self.lock_dir(&request.name);
                acquire(&session, request, &LockQueue::new(&dir, kind)).await
            }
        }
    }

    /// The exclusive holder, or the oldest reader.
    async fn inspect(&self, name: &LockName) -> Result<Option<LockInfo>, LockError> {
        let holders = self.lock_holders(name).await?;
        Ok(holders.into_iter().next().map(|holder| holder.info))
    }

    async fn holders(
        &self,
        name: &LockName,
        primitive: Primitive,
    ) -> Result<Vec<LockInfo>, LockError> {
        let held = match primitive {
            Primitive::Lock => self.lock_holders(name).await?,
            Primitive::Semaphore => {
                let session = self.sessions.get().await?;
                match self.config.layout {
                    Layout::Curator => {
                        let dir = curator::semaphore::leases_dir(&self.lock_dir(name));
                        holders(&session, &dir, Object::Leases).await?
                    }
                    _ => {
                        let dir = permits_dir(&self.config.base, name);
                        holders(&session, &dir, Object::Semaphore).await?
                    }
                }
            }
        };
        Ok(held.into_iter().map(|holder| holder.info).collect())
    }

    /// Watches the holder's node (its value changes and its deletion), or
    /// the contenders directory while the lock is free, re-reading the
    /// holder on every notification (see the crate docs).
    fn watch(&self, name: &LockName) -> HolderStream {
        holder_stream(HolderNodes::new(
            Arc::clone(&self.sessions),
            self.lock_dir(name),
            self.config.layout,
        ))
    }

    /// Deletes the holder's node, or every reader's.
    async fn force_release(&self, name: &LockName) -> Result<bool, LockError> {
        let session = self.sessions.get().await?;
        for _ in 0..RACE_RETRIES {
            let held = self.lock_holders(name).await?;
            if held.is_empty() {
                return Ok(false);
            }
            let mut removed = false;
            for holder in held {
                let path = holder.path;
                match session.request(session.client().delete(&path, None)).await {
                    Ok(()) => removed = true,
                    Err(ZkError::NoNode) => {}
                    Err(e) => return Err(error::map(&format!("delete {path}"), e)),
                }
            }
            if removed {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Deletes the namespace's subtree, `<base>/<namespace>`, deepest
    /// nodes first (see `crate::purge`): holders' nodes go with it, and
    /// their own-node watches report the locks taken away.
    /// In Curator's layout, where keys do not live under their namespace,
    /// [`LockError::NotSupported`].
    async fn purge_namespace(&self, namespace: &Namespace) -> Result<(), LockError> {
        if self.config.layout == Layout::Curator {
            return Err(LockError::not_supported(
                self.name(),
                "removing a whole namespace in the curator layout (keys are paths shared by every namespace)",
            ));
        }
        let session = self.sessions.get().await?;
        purge::delete_tree(&session, &namespace_dir(&self.config.base, namespace)).await
    }
}

impl fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkBackend")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
