//! [`LockerCore`]: what every handle on one store and namespace shares —
//! the backend, the settings, the lease keeper and the metric keys — and
//! the one path by which any of them takes a hold.
//!
//! [`Locker`](crate::Locker) wraps it, and so do the handles a locker
//! makes ([`Election`](crate::Election), [`RwLock`](crate::RwLock),
//! [`Semaphore`](crate::Semaphore)): they hold this state, not the
//! `Locker`, so that `Locker` sits above them and builds them.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

use crate::backend::{
    AcquireRequest, Acquired, AcquisitionCleanups, Backend, Primitive, WaitMode,
    ABANDONED_CLEANUP_GRACE,
};
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::info::{HoldKind, LockInfo};
use crate::keeper::LeaseKeeper;
use crate::key::{LockKey, LockName, Namespace};
use crate::loss::loss_channel;
use crate::options::{check_limit, check_value, LockOptions, LockerOptions, WaitLimit};
use crate::owner::OwnerId;
use crate::taking::Taking;
use crate::telemetry::{Labels, MetricKeys, Waiting};
use crate::watch::HolderWatch;

/// The state shared by a locker, its clones and the handles it makes.
/// Cheap to clone (`Arc`s).
#[derive(Clone)]
pub(crate) struct LockerCore {
    backend: Arc<dyn Backend>,
    options: Arc<LockerOptions>,
    /// Renews the leases of this store's guards (shared by every handle
    /// made from one locker, whatever its options).
    keeper: LeaseKeeper,
    /// The metric keys of this store and namespace.
    metric_keys: MetricKeys,
}

impl LockerCore {
    /// The state of a new locker over `backend` with `options`.
    pub(crate) fn new(backend: Arc<dyn Backend>, options: LockerOptions) -> Self {
        Self {
            backend,
            options: Arc::new(options),
            keeper: LeaseKeeper::default(),
            metric_keys: MetricKeys::default(),
        }
    }

    /// The same store and lease keeper with other settings.
    pub(crate) fn with_options(&self, options: LockerOptions) -> Self {
        Self {
            backend: Arc::clone(&self.backend),
            options: Arc::new(options),
            keeper: self.keeper.clone(),
            // The namespace may differ: keys of its own.
            metric_keys: MetricKeys::default(),
        }
    }

    /// The store.
    pub(crate) fn backend(&self) -> &dyn Backend {
        &*self.backend
    }

    /// The settings.
    pub(crate) fn options(&self) -> &LockerOptions {
        &self.options
    }

    /// The namespace locks are taken in.
    pub(crate) fn namespace(&self) -> &Namespace {
        &self.options.namespace
    }

    /// The full name of `key` in this namespace.
    pub(crate) fn name(&self, key: &str) -> Result<LockName, LockError> {
        Ok(LockName::new(
            self.options.namespace.clone(),
            LockKey::new(key)?,
        ))
    }

    /// Who holds `key`, or `None` if it is free.
    pub(crate) async fn inspect(&self, key: &str) -> Result<Option<LockInfo>, LockError> {
        let name = self.name(key)?;
        self.backend.inspect(&name).await
    }

    /// The holder of `key` now and as it changes; see [`HolderWatch`].
    pub(crate) fn watch(&self, key: &str) -> Result<HolderWatch, LockError> {
        let name = self.name(key)?;
        Ok(HolderWatch::new(key.to_owned(), self.backend.watch(&name)))
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
    /// locks without [`Capabilities::shared_locks`](crate::backend::Capabilities::shared_locks),
    /// permits without [`Capabilities::semaphores`](crate::backend::Capabilities::semaphores)
    /// or with a limit out of range.
    pub(crate) fn check_kind(&self, kind: HoldKind) -> Result<(), LockError> {
        let caps = self.backend.capabilities();
        match kind {
            HoldKind::Exclusive => Ok(()),
            HoldKind::Shared if caps.shared_locks => Ok(()),
            HoldKind::Shared => Err(LockError::not_supported(
                self.backend.name(),
                "read-write locks",
            )),
            HoldKind::Permit { limit } => {
                check_limit(limit)?;
                if caps.semaphores {
                    Ok(())
                } else {
                    Err(LockError::not_supported(self.backend.name(), "semaphores"))
                }
            }
        }
    }

    /// Takes a hold of `taking` on `key` if one is free now.
    pub(crate) async fn try_take(
        &self,
        key: &str,
        taking: Taking,
    ) -> Result<Option<LockGuard>, LockError> {
        self.acquire(key, WaitMode::Try, true, String::new(), taking)
            .await
    }

    /// Takes a hold of `taking` on `key` with per-call options; see
    /// [`Locker::lock_with`](crate::Locker::lock_with).
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

    /// One acquisition: the request checked and built, the backend asked
    /// within the deadline, and a guard started on what it took.
    async fn acquire(
        &self,
        key: &str,
        wait: WaitMode,
        auto_renew: bool,
        value: String,
        taking: Taking,
    ) -> Result<Option<LockGuard>, LockError> {
        let name = self.name(key)?;
        check_value(&value)?;
        let kind = taking.hold_kind();
        self.check_kind(kind)?;
        let started = Instant::now();
        let labels = Labels::new(
            &self.metric_keys,
            self.backend.name(),
            &self.options.namespace,
            taking,
        );
        let (reporter, signal) = loss_channel();
        let request = AcquireRequest {
            name,
            owner: OwnerId::generate(),
            ttl: self.options.ttl,
            wait,
            value,
            kind,
            taking,
            loss: reporter,
        };
        let span = tracing::debug_span!(
            "distlock.acquire",
            backend = self.backend.name(),
            namespace = %request.name.namespace(),
            key = %request.name.key(),
            token = tracing::field::Empty,
        );
        let asked = self.ask_backend(&request, started, &labels, &span);
        let Some(acquired) = asked.await? else {
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

    /// Asks the backend for `request` within its deadline (enforced here
    /// for every backend, by dropping the call: backends are cancel-safe,
    /// see [`Backend`]; a call dropped at its deadline reports so once the
    /// clean-ups it started are done, see [`ABANDONED_CLEANUP_GRACE`]),
    /// counted as a waiter while it may wait and
    /// recorded in the metrics of an acquisition `started` then.
    async fn ask_backend(
        &self,
        request: &AcquireRequest,
        started: Instant,
        labels: &Labels,
        span: &tracing::Span,
    ) -> Result<Option<Acquired>, LockError> {
        let waiting = Waiting::start(labels, request.wait.may_wait());
        let cleanups = AcquisitionCleanups::default();
        let attempt = cleanups.collecting(self.backend.acquire(request).instrument(span.clone()));
        let acquired = match request.wait.deadline() {
            Some(deadline) => {
                // A `let` of its own: the dropped attempt starts its
                // clean-ups by the end of this statement.
                let finished_in_time = tokio::time::timeout_at(deadline.into(), attempt).await;
                match finished_in_time {
                    Ok(acquired) => acquired,
                    Err(_) => {
                        cleanups.finished(ABANDONED_CLEANUP_GRACE).await;
                        Ok(None)
                    }
                }
            }
            None => attempt.await,
        };
        drop(waiting);
        let outcome = acquired.as_ref().map(Option::is_some);
        labels.acquire_ended(started.elapsed(), outcome);
        acquired
    }
}

/// Shown as the locker it serves: its store, namespace and ttl.
impl fmt::Debug for LockerCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("backend", &self.backend)
            .field("namespace", &self.options.namespace)
            .field("ttl", &self.options.ttl)
            .finish()
    }
}
