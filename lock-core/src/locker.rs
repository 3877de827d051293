//! [`Locker`]: the handle application code takes locks through.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

use crate::backend::{AcquireRequest, Backend, Capabilities, Primitive, WaitMode};
use crate::election::Election;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::info::{HoldKind, LockInfo};
use crate::keeper::LeaseKeeper;
use crate::key::{LockKey, LockName, Namespace};
use crate::loss::loss_channel;
use crate::options::{LockOptions, LockerOptions, WaitLimit};
use crate::owner::OwnerId;
use crate::rwlock::RwLock;
use crate::semaphore::Semaphore;
use crate::telemetry::{Labels, MetricKeys, Taking, Waiting};
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
    backend: Arc<dyn Backend>,
    options: Arc<LockerOptions>,
    /// Renews the leases of this locker's guards (shared by its clones and
    /// by the handles made with other options).
    keeper: LeaseKeeper,
    /// The metric keys of this locker's store and namespace.
    metric_keys: MetricKeys,
}

impl Locker {
    /// A locker over `backend` with `options`.
    pub fn new(backend: Arc<dyn Backend>, options: LockerOptions) -> Self {
        Self {
            backend,
            options: Arc::new(options),
            keeper: LeaseKeeper::default(),
            metric_keys: MetricKeys::default(),
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
            backend: Arc::clone(&self.backend),
            options: Arc::new(options),
            keeper: self.keeper.clone(),
            // The namespace may differ: keys of its own.
            metric_keys: MetricKeys::default(),
        }
    }

    /// The same store, locks in `namespace`.
    pub fn with_namespace(&self, namespace: &str) -> Result<Self, LockError> {
        let mut options = (*self.options).clone();
        options.namespace = Namespace::new(namespace)?;
        Ok(self.with_options(options))
    }

    /// The backend's short name (`mem`, `file`, `redis`, ...).
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// What the backend can do.
    pub fn capabilities(&self) -> Capabilities {
        self.backend.capabilities()
    }

    /// This locker's settings.
    pub fn options(&self) -> &LockerOptions {
        &self.options
    }

    /// The namespace locks are taken in.
    pub fn namespace(&self) -> &Namespace {
        &self.options.namespace
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
        self.try_take(key, Taking::Lock).await
    }

    /// Takes `key` with per-call options. A zero wait makes one attempt and
    /// fails with [`LockError::Timeout`] if the lock is held.
    pub async fn lock_with(&self, key: &str, options: LockOptions) -> Result<LockGuard, LockError> {
        self.take(key, options, Taking::Lock).await
    }

    /// Takes a hold of `kind` on `key` if one is free now.
    pub(crate) async fn try_take(
        &self,
        key: &str,
        taking: Taking,
    ) -> Result<Option<LockGuard>, LockError> {
        self.acquire(key, WaitMode::Try, true, String::new(), taking)
            .await
    }

    /// Takes a hold of `kind` on `key` with per-call options; see
    /// [`lock_with`](Self::lock_with).
    pub(crate) async fn take(
        &self,
        key: &str,
        options: LockOptions,
        taking: Taking,
    ) -> Result<LockGuard, LockError> {
        let wait = match options.wait {
            WaitLimit::Default => self.options.wait,
            WaitLimit::Forever => None,
            WaitLimit::For(wait) => Some(wait),
        };
        let started = Instant::now();
        let mode = match wait {
            Some(wait) if wait.is_zero() => WaitMode::Try,
            Some(wait) => WaitMode::Until(started + wait),
            None => WaitMode::Forever,
        };
        match self
            .acquire(key, mode, options.auto_renew, options.value, taking)
            .await?
        {
            Some(guard) => Ok(guard),
            None => Err(LockError::Timeout {
                key: key.to_owned(),
                waited: started.elapsed(),
            }),
        }
    }

    /// Who holds `key`, or `None` if it is free.
    pub async fn inspect(&self, key: &str) -> Result<Option<LockInfo>, LockError> {
        let name = self.name(key)?;
        self.backend.inspect(&name).await
    }

    /// The holder of `key` now and after every change, pushed by the store;
    /// see [`HolderWatch`]. Fails only on a bad key.
    pub fn watch(&self, key: &str) -> Result<HolderWatch, LockError> {
        let name = self.name(key)?;
        Ok(HolderWatch::new(key.to_owned(), self.backend.watch(&name)))
    }

    /// The leader election called `name`, with this locker's store,
    /// namespace and ttl. Names follow the key rules; an election is the
    /// lock of the same name, whose holder is the leader (so
    /// [`inspect`](Self::inspect) and `distlock status` show the leader).
    pub fn election(&self, name: &str) -> Result<Election, LockError> {
        LockKey::new(name)?;
        Ok(Election::new(self.clone(), name.to_owned()))
    }

    /// Removes the lock on `key` whoever holds it: an operator's override
    /// for a holder known to be dead. The holder's guard reports the loss.
    /// Returns whether a lock was removed. Fails with
    /// [`LockError::NotSupported`] where the store cannot do this (see
    /// [`Capabilities::force_release`]).
    pub async fn force_release(&self, key: &str) -> Result<bool, LockError> {
        let name = self.name(key)?;
        self.backend.force_release(&name).await
    }

    /// Removes everything the store keeps for this locker's namespace:
    /// every hold, waiter, stored limit and fencing counter in it (see
    /// [`Backend::purge_namespace`](crate::backend::Backend::purge_namespace)).
    /// Holders in the namespace lose their locks and its tokens may start
    /// again from the bottom, so this is for namespaces nobody uses any
    /// more: those a test, `distlock check` or a benchmark made for
    /// itself. Fails with [`LockError::NotSupported`] where the store
    /// cannot do it.
    pub async fn purge_namespace(&self) -> Result<(), LockError> {
        self.backend.purge_namespace(self.namespace()).await
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
        self.check_kind(HoldKind::Permit { limit })?;
        Ok(Semaphore::new(self.clone(), name.to_owned(), limit))
    }

    /// The read-write lock called `name`, with this locker's store,
    /// namespace and ttl. It is the lock of the same name: its write side
    /// is what [`lock`](Self::lock) takes, and its readers exclude plain
    /// locks as they exclude writers. Fails on a bad name, or with
    /// [`LockError::NotSupported`] where the store has no shared locks
    /// ([`Capabilities::shared_locks`]).
    pub fn rwlock(&self, name: &str) -> Result<RwLock, LockError> {
        LockKey::new(name)?;
        self.check_kind(HoldKind::Shared)?;
        Ok(RwLock::new(self.clone(), name.to_owned()))
    }

    /// Every holder of `key`'s lock: its exclusive holder, or every reader
    /// of its read-write lock (empty if it is free).
    pub async fn holders(&self, key: &str) -> Result<Vec<LockInfo>, LockError> {
        self.holders_of(key, Primitive::Lock).await
    }

    /// Every holder of a permit of the semaphore called `key`, whatever
    /// its limit. Fails with [`LockError::NotSupported`] where the store
    /// has no semaphores.
    pub async fn permit_holders(&self, key: &str) -> Result<Vec<LockInfo>, LockError> {
        self.holders_of(key, Primitive::Semaphore).await
    }

    /// Every holder of `key`'s lock or of its semaphore.
    pub(crate) async fn holders_of(
        &self,
        key: &str,
        primitive: Primitive,
    ) -> Result<Vec<LockInfo>, LockError> {
        let name = self.name(key)?;
        self.backend.holders(&name, primitive).await
    }

    /// Refuses what the store cannot take, before anything is sent: read
    /// locks without [`Capabilities::shared_locks`], permits without
    /// [`Capabilities::semaphores`] or with a limit out of range.
    fn check_kind(&self, kind: HoldKind) -> Result<(), LockError> {
        let caps = self.backend.capabilities();
        match kind {
            HoldKind::Exclusive => Ok(()),
            HoldKind::Shared if caps.shared_locks => Ok(()),
            HoldKind::Shared => Err(LockError::not_supported(
                self.backend.name(),
                "read-write locks",
            )),
            HoldKind::Permit { limit } => {
                crate::options::check_limit(limit)?;
                if caps.semaphores {
                    Ok(())
                } else {
                    Err(LockError::not_supported(self.backend.name(), "semaphores"))
                }
            }
        }
    }

    /// The full name of `key` in this locker's namespace.
    pub fn name(&self, key: &str) -> Result<LockName, LockError> {
        Ok(LockName::new(
            self.options.namespace.clone(),
            LockKey::new(key)?,
        ))
    }

    async fn acquire(
        &self,
        key: &str,
        wait: WaitMode,
        auto_renew: bool,
        value: String,
        taking: Taking,
    ) -> Result<Option<LockGuard>, LockError> {
        let name = self.name(key)?;
        crate::options::check_value(&value)?;
        let kind = taking.hold_kind();
        self.check_kind(kind)?;
        let started = Instant::now();
        let labels = Labels::new(
            &self.metric_keys,
            self.backend.name(),
            &self.options.namespace,
            taking,
        );
        let waiting = Waiting::start(&labels, wait.may_wait());
        let (reporter, signal) = loss_channel();
        let request = AcquireRequest {
            name,
            owner: OwnerId::generate(),
            ttl: self.options.ttl,
            wait,
            value,
            kind,
            loss: reporter,
        };
        let span = tracing::debug_span!(
            "distlock.acquire",
            backend = self.backend.name(),
            namespace = %request.name.namespace(),
            key = %request.name.key(),
            token = tracing::field::Empty,
        );
        let attempt = self.backend.acquire(&request).instrument(span.clone());
        let acquired = match wait.deadline() {
            // The deadline is enforced here for every backend; backends
            // must be cancel-safe (see `Backend`).
            Some(deadline) => tokio::time::timeout_at(deadline.into(), attempt)
                .await
                .unwrap_or(Ok(None)),
            None => attempt.await,
        };
        drop(waiting);
        let acquired = match acquired {
            Ok(acquired) => acquired,
            Err(error) => {
                labels.acquire_ended(started.elapsed(), Err(&error));
                return Err(error);
            }
        };
        labels.acquire_ended(started.elapsed(), Ok(acquired.is_some()));
        let Some(acquired) = acquired else {
            return Ok(None);
        };
        span.record("token", acquired.token.get());
        Ok(Some(LockGuard::start(
            request,
            self.backend.name(),
            acquired,
            signal,
            auto_renew,
            &self.keeper,
            labels,
        )))
    }
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("backend", &self.backend)
            .field("namespace", &self.options.namespace)
            .field("ttl", &self.options.ttl)
            .finish()
    }
}
