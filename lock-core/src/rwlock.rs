//! [`RwLock`]: a lock that many readers can share.

use std::fmt;

use crate::backend::Primitive;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::info::LockInfo;
use crate::locker_core::LockerCore;
use crate::options::LockOptions;
use crate::taking::Taking;

/// A read-write lock, made by
/// [`Locker::rwlock`](crate::Locker::rwlock): many readers at once, or
/// one writer alone.
///
/// It is the lock of its name: a writer holds exactly what
/// [`Locker::lock`](crate::Locker::lock) takes, so plain locks and
/// writers exclude each other and readers exclude both. A writer waiting
/// for readers to leave is not overtaken by readers that ask after it.
/// Every guard, read or write, is a [`LockGuard`] with a fencing token
/// from the name's one strictly increasing counter, renewal in the
/// background, a lost signal and release on drop.
///
/// ```
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// let locks = lock_core::Locker::memory("rwlock-docs")?;
/// let config = locks.rwlock("config")?;
/// let a = config.read().await?;
/// let b = config.read().await?;                     // readers share
/// assert!(config.try_write().await?.is_none());     // a writer waits for both
/// assert!(locks.try_lock("config").await?.is_none()); // so does a plain lock
/// drop((a, b));
/// let w = config.write().await?;
/// assert!(config.try_read().await?.is_none());
/// # drop(w);
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
#[derive(Clone)]
pub struct RwLock {
    core: LockerCore,
    name: String,
}

impl RwLock {
    pub(crate) fn new(core: LockerCore, name: String) -> Self {
        Self { core, name }
    }

    /// The lock's name (a lock key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes a read lock, waiting as long as the locker's default wait.
    pub async fn read(&self) -> Result<LockGuard, LockError> {
        self.read_with(LockOptions::new()).await
    }

    /// Takes a read lock if no writer holds the lock or waits for it now.
    pub async fn try_read(&self) -> Result<Option<LockGuard>, LockError> {
        self.core.try_take(&self.name, Taking::Read).await
    }

    /// Takes a read lock with per-call options, as
    /// [`Locker::lock_with`](crate::Locker::lock_with).
    pub async fn read_with(&self, options: LockOptions) -> Result<LockGuard, LockError> {
        self.core.take(&self.name, options, Taking::Read).await
    }

    /// Takes the write lock, waiting as long as the locker's default wait.
    pub async fn write(&self) -> Result<LockGuard, LockError> {
        self.write_with(LockOptions::new()).await
    }

    /// Takes the write lock if nobody holds the lock now.
    pub async fn try_write(&self) -> Result<Option<LockGuard>, LockError> {
        self.core.try_take(&self.name, Taking::Write).await
    }

    /// Takes the write lock with per-call options, as
    /// [`Locker::lock_with`](crate::Locker::lock_with).
    pub async fn write_with(&self, options: LockOptions) -> Result<LockGuard, LockError> {
        self.core.take(&self.name, options, Taking::Write).await
    }

    /// The writer, or every reader, holding the lock now.
    pub async fn holders(&self) -> Result<Vec<LockInfo>, LockError> {
        self.core.holders_of(&self.name, Primitive::Lock).await
    }
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.name)
            .field("locker", &self.core)
            .finish()
    }
}
