//! [`Semaphore`]: at most `limit` holders of a name at once.

use std::fmt;

use crate::backend::Primitive;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::info::LockInfo;
use crate::locker_core::LockerCore;
use crate::options::LockOptions;
use crate::taking::Taking;

/// A counting semaphore, made by
/// [`Locker::semaphore`](crate::Locker::semaphore): at most
/// [`limit`](Self::limit) permits are held at once.
///
/// A permit is a [`LockGuard`] with the guarantees of a lock's guard: a
/// fencing token (one strictly increasing counter per semaphore), renewal
/// in the background, [`LockGuard::lost`] before the store can give the
/// permit to someone else, and release on drop. A permit whose holder
/// vanished comes back after the ttl (on stores whose locks live as long as
/// a session or process: when that ends). The limit is stored with the
/// semaphore; asking with another limit while permits are held fails with
/// [`LockError::LimitMismatch`].
///
/// ```
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// let locks = lock_core::Locker::memory("semaphore-docs")?;
/// let pool = locks.semaphore("db-connections", 2)?;
/// let first = pool.acquire().await?;
/// let second = pool.acquire().await?;
/// assert!(pool.try_acquire().await?.is_none(), "both permits are out");
/// assert_eq!(pool.holders().await?.len(), 2);
/// assert!(second.token() > first.token());
/// first.release().await?;
/// let third = pool.try_acquire().await?.expect("a permit came back");
/// # drop((second, third));
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
#[derive(Clone)]
pub struct Semaphore {
    core: LockerCore,
    name: String,
    limit: u32,
}

impl Semaphore {
    pub(crate) fn new(core: LockerCore, name: String, limit: u32) -> Self {
        Self { core, name, limit }
    }

    /// The semaphore's name (a lock key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many permits may be held at once.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Takes a permit, waiting as long as the locker's default wait
    /// (forever unless configured); fails with [`LockError::Timeout`] when
    /// the wait runs out.
    pub async fn acquire(&self) -> Result<LockGuard, LockError> {
        self.acquire_with(LockOptions::new()).await
    }

    /// Takes a permit if one is free now; `Ok(None)` if all are held.
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>, LockError> {
        self.core.try_take(&self.name, self.taking()).await
    }

    /// Takes a permit with per-call options (wait, value, renewal), as
    /// [`Locker::lock_with`](crate::Locker::lock_with) takes a lock.
    pub async fn acquire_with(&self, options: LockOptions) -> Result<LockGuard, LockError> {
        self.core.take(&self.name, options, self.taking()).await
    }

    /// Every permit holder, in the order they took their permits where
    /// the store knows it.
    pub async fn holders(&self) -> Result<Vec<LockInfo>, LockError> {
        self.core.holders_of(&self.name, Primitive::Semaphore).await
    }

    fn taking(&self) -> Taking {
        Taking::Permit { limit: self.limit }
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("limit", &self.limit)
            .field("locker", &self.core)
            .finish()
    }
}
