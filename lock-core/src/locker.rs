//! [`Locker`]: the handle application code takes locks through, and
//! the maker of the handles built on its locks (elections, read-write
//! locks, semaphores). The state they share is [`LockerCore`].

use std::fmt;
use std::sync::Arc;

use crate::backend::{Backend, Capabilities, Primitive};
use crate::election::Election;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::info::{HoldKind, LockInfo};
use crate::key::{LockKey, LockName, Namespace};
use crate::locker_core::LockerCore;
use crate::options::{LockOptions, LockerOptions};
use crate::rwlock::RwLock;
use crate::semaphore::Semaphore;
use crate::taking::Taking;
use crate::watch::HolderWatch;

/// Takes locks in one store and namespace.
///
/// Cheap to clone (an `Arc` over the backend); `Send + Sync`. Locks are not
/// reentrant: a second `lock` of a held key waits like any other caller,
/// even from the same locker.
///
/// ```
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// use std::time::Duration;
/// use lock_core::{LockOptions, Locker};
///
/// let locks = Locker::memory("docs-example")?;
/// let guard = locks.lock("invoices/2026-11").await?;
/// assert!(locks.try_lock("invoices/2026-11").await?.is_none());
/// let waited = locks
///     .lock_with("invoices/2026-11", LockOptions::new().wait(Duration::from_millis(50)))
///     .await;
/// assert!(waited.unwrap_err().is_timeout());
/// println!("token {}", guard.token());
/// guard.release().await?;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
#[derive(Clone)]
pub struct Locker {
    /// The store, settings, lease keeper and metric keys, shared with
    /// the handles this locker makes.
    core: LockerCore,
}

impl Locker {
    /// A locker over `backend` with `options`.
    pub fn new(backend: Arc<dyn Backend>, options: LockerOptions) -> Self {
        Self {
            core: LockerCore::new(backend, options),
        }
    }

    /// A locker over the in-process memory store called `store` (shared by
    /// every locker of this process that names the same store).
    pub fn memory(store: &str) -> Result<Self, LockError> {
        Ok(Self::new(
            Arc::new(crate::memory::MemoryBackend::named(store)),
            LockerOptions::default(),
        ))
    }

    /// The same store with other settings for locks taken through the new
    /// handle.
    pub fn with_options(&self, options: LockerOptions) -> Self {
        Self {
            core: self.core.with_options(options),
        }
    }

    /// The same store, locks in `namespace`.
    pub fn with_namespace(&self, namespace: &str) -> Result<Self, LockError> {
        let mut options = self.core.options().clone();
        options.namespace = Namespace::new(namespace)?;
        Ok(self.with_options(options))
    }

    /// The backend's short name (`mem`, `file`, `redis`, ...).
    pub fn backend_name(&self) -> &'static str {
        self.core.backend().name()
    }

    /// What the backend can do.
    pub fn capabilities(&self) -> Capabilities {
        self.core.backend().capabilities()
    }

    /// This locker's settings.
    pub fn options(&self) -> &LockerOptions {
        self.core.options()
    }

    /// The namespace locks are taken in.
    pub fn namespace(&self) -> &Namespace {
        self.core.namespace()
    }

    /// Takes `key`, waiting as long as the locker's default wait (forever
    /// unless configured). Fails with [`LockError::Timeout`] when the wait
    /// runs out.
    ///
    /// A guard whose store answered later than the ttl allows (this process
    /// stalled, or the store did) comes back already lost
    /// ([`LossReason::ValidityExpired`](crate::LossReason)): check
    /// [`LockGuard::is_held`] or watch [`LockGuard::lost`] before and while
    /// acting under the lock.
    pub async fn lock(&self, key: &str) -> Result<LockGuard, LockError> {
        self.lock_with(key, LockOptions::new()).await
    }

    /// Takes `key` if it is free now; `Ok(None)` if someone holds it.
    pub async fn try_lock(&self, key: &str) -> Result<Option<LockGuard>, LockError> {
        self.core.try_take(key, Taking::Lock).await
    }

    /// Takes `key` with per-call options. A zero wait makes one attempt and
    /// fails with [`LockError::Timeout`] if the lock is held.
    pub async fn lock_with(&self, key: &str, options: LockOptions) -> Result<LockGuard, LockError> {
        self.core.take(key, options, Taking::Lock).await
    }

    /// Who holds `key`, or `None` if it is free.
    pub async fn inspect(&self, key: &str) -> Result<Option<LockInfo>, LockError> {
        self.core.inspect(key).await
    }

    /// The holder of `key` now and as it changes, pushed by the store; see
    /// [`HolderWatch`] (and its fine print). Fails only on a bad key.
    ///
    /// A watch reports the current state first; then states in the order
    /// they happened (tokens never go back), never the same state twice in
    /// a row, and the latest state always arrives. On stores whose
    /// capabilities declare
    /// [`watch_every_change`](crate::backend::Capabilities::watch_every_change)
    /// (memory, Redis on one instance, Cluster or Sentinel, and etcd) every
    /// change is delivered; on the others (files, Redlock, ZooKeeper,
    /// PostgreSQL) changes closer together than one re-read may be merged
    /// (an intermediate holder may not appear).
    pub fn watch(&self, key: &str) -> Result<HolderWatch, LockError> {
        self.core.watch(key)
    }

    /// The leader election called `name`, with this locker's store,
    /// namespace and ttl. Names follow the key rules; an election is the
    /// lock of the same name, whose holder is the leader (so
    /// [`inspect`](Self::inspect) and `distlock status` show the leader).
    pub fn election(&self, name: &str) -> Result<Election, LockError> {
        LockKey::new(name)?;
        Ok(Election::new(self.core.clone(), name.to_owned()))
    }

    /// Removes the lock on `key` whoever holds it: an operator's override
    /// for a holder known to be dead. The holder's guard reports the loss.
    /// Returns whether a lock was removed. Fails with
    /// [`LockError::NotSupported`] where the store cannot do this (see
    /// [`Capabilities::force_release`]).
    pub async fn force_release(&self, key: &str) -> Result<bool, LockError> {
        let name = self.name(key)?;
        self.core.backend().force_release(&name).await
    }

    /// Removes everything the store keeps for this locker's namespace:
    /// every hold, waiter, stored limit and fencing counter in it (see
    /// [`Backend::purge_namespace`]).
    /// Holders in the namespace lose their locks and its tokens may start
    /// again from the bottom, so this is for namespaces nobody uses any
    /// more: those a test, `distlock check` or a benchmark made for
    /// itself. Fails with [`LockError::NotSupported`] where the store
    /// cannot do it.
    pub async fn purge_namespace(&self) -> Result<(), LockError> {
        self.core.backend().purge_namespace(self.namespace()).await
    }

    /// The semaphore called `name`: at most `limit` (1 to
    /// [`MAX_SEMAPHORE_LIMIT`](crate::MAX_SEMAPHORE_LIMIT)) permits held
    /// at once, with this locker's store, namespace and ttl. Names follow
    /// the key rules; a semaphore is a separate object from the lock of
    /// the same name. Fails on a bad name or limit, or with
    /// [`LockError::NotSupported`] where the store has no semaphores
    /// ([`Capabilities::semaphores`]).
    pub fn semaphore(&self, name: &str, limit: u32) -> Result<Semaphore, LockError> {
        LockKey::new(name)?;
        self.core.check_kind(HoldKind::Permit { limit })?;
        Ok(Semaphore::new(self.core.clone(), name.to_owned(), limit))
    }

    /// The read-write lock called `name`, with this locker's store,
    /// namespace and ttl. It is the lock of the same name: its write side
    /// is what [`lock`](Self::lock) takes, and its readers exclude plain
    /// locks as they exclude writers. Fails on a bad name, or with
    /// [`LockError::NotSupported`] where the store has no shared locks
    /// ([`Capabilities::shared_locks`]).
    pub fn rwlock(&self, name: &str) -> Result<RwLock, LockError> {
        LockKey::new(name)?;
        self.core.check_kind(HoldKind::Shared)?;
        Ok(RwLock::new(self.core.clone(), name.to_owned()))
    }

    /// Every holder of `key`'s lock: its exclusive holder, or every reader
    /// of its read-write lock (empty if it is free).
    pub async fn holders(&self, key: &str) -> Result<Vec<LockInfo>, LockError> {
        self.core.holders_of(key, Primitive::Lock).await
    }

    /// Every holder of a permit of the semaphore called `key`, whatever
    /// its limit. Fails with [`LockError::NotSupported`] where the store
    /// has no semaphores.
    pub async fn permit_holders(&self, key: &str) -> Result<Vec<LockInfo>, LockError> {
        self.core.holders_of(key, Primitive::Semaphore).await
    }

    /// The full name of `key` in this locker's namespace.
    pub fn name(&self, key: &str) -> Result<LockName, LockError> {
        self.core.name(key)
    }
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Its store, namespace and ttl.
        fmt::Debug::fmt(&self.core, f)
    }
}
