//! [`LockGuard`]: proof of holding a lock, and the way to give it back.

use std::fmt;
use std::sync::{Arc, Mutex};

use tokio::runtime::Handle;
use tracing::Instrument;

use crate::backend::spawn_detached;
use crate::backend::{AcquireRequest, Acquired};
use crate::error::LockError;
use crate::info::HoldKind;
use crate::keeper::{Kept, LeaseKeeper};
use crate::key::LockName;
use crate::loss::LossSignal;
use crate::loss_reason::LossReason;
use crate::owner::OwnerId;
use crate::renewal::Lease;
use crate::telemetry::{Holding, Labels};
use crate::token::FencingToken;

/// A held lock.
///
/// While the guard lives, its lease is renewed in the background (for
/// stores that need it). If the lock is lost anyway — a renewal refused,
/// the validity window closed, the session expired, the lock removed —
/// [`is_held`](Self::is_held) turns false and [`lost`](Self::lost)
/// resolves, before another client can have taken the lock where the store
/// allows knowing that (per-lock leases are reported lost at
/// `last renewal + ttl − drift`).
///
/// [`release`](Self::release) gives the lock back and reports whether it
/// was still ours. Dropping the guard releases it in the background: drop
/// never blocks and never panics, also outside a runtime (the lock is then
/// released synchronously where the store allows, or left to expire).
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    name: LockName,
    owner: OwnerId,
    token: FencingToken,
    kind: HoldKind,
    value: Mutex<String>,
    backend: &'static str,
    lease: Arc<Lease>,
    signal: LossSignal,
    kept: Option<Kept>,
    runtime: Option<Handle>,
    finished: bool,
}

impl LockGuard {
    pub(crate) fn start(
        request: AcquireRequest,
        backend: &'static str,
        acquired: Acquired,
        signal: LossSignal,
        auto_renew: bool,
        keeper: &LeaseKeeper,
        labels: Labels,
    ) -> Self {
        let AcquireRequest {
            name,
            owner,
            ttl,
            value,
            kind,
            loss: reporter,
            ..
        } = request;
        let holding = Arc::new(Holding::start(labels));
        reporter.attach(Arc::clone(&holding));
        let lease = Arc::new(Lease::new(
            name.key().to_string(),
            holding,
            acquired.held,
            reporter,
            acquired.renewal,
            ttl,
            acquired.requested_at,
        ));
        lease.report_if_expired();
        let span = tracing::debug_span!(
            "distlock.lease",
            backend,
            namespace = %name.namespace(),
            key = %name.key(),
            token = acquired.token.get(),
        );
        let kept = keeper.keep(&lease, auto_renew, span);
        Self {
            name,
            owner,
            token: acquired.token,
            kind,
            value: Mutex::new(value),
            backend,
            lease,
            signal,
            kept,
            runtime: Handle::try_current().ok(),
            finished: false,
        }
    }

    /// The key this guard holds.
    pub fn key(&self) -> &str {
        self.name.key().as_str()
    }

    /// The namespace and key this guard holds.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The owner id of this acquisition (`hostname/pid/uuid`).
    pub fn owner(&self) -> &OwnerId {
        &self.owner
    }

    /// The fencing token: strictly greater than every token issued before
    /// for this key in this store. Send it with every write made under the
    /// lock.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// How this guard holds its name: the lock alone (a lock, leadership
    /// or write lock), a read lock, or a semaphore's permit.
    pub fn kind(&self) -> HoldKind {
        self.kind
    }

    /// The value stored with the lock by this holder (empty if none).
    pub fn value(&self) -> String {
        self.value.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the value stored with the lock, keeping the lock; watchers
    /// see the change. Fails with [`LockError::Lost`] if the lock is no
    /// longer ours and with [`LockError::InvalidValue`] if `value` breaks
    /// the value rules (see [`LockOptions::value`](crate::LockOptions::value)).
    pub async fn set_value(&self, value: impl Into<String>) -> Result<(), LockError> {
        let value = value.into();
        crate::options::check_value(&value)?;
        if let Some(reason) = self.signal.loss_reason() {
            return Err(LockError::lost(self.key(), reason));
        }
        let span = tracing::debug_span!("distlock.set_value", backend = self.backend, key = %self.name.key());
        self.lease.held.set_value(&value).instrument(span).await?;
        *self.value.lock().unwrap_or_else(|p| p.into_inner()) = value;
        Ok(())
    }

    /// False once the lock is known to be lost or released. For a store
    /// whose locks expire by themselves, also false as soon as the lease's
    /// validity window has closed without a renewal, even before the
    /// renewal timer has run: a process frozen past its lease (a stopped
    /// VM, a long pause) does not see "held" when it wakes.
    pub fn is_held(&self) -> bool {
        self.lease.report_if_expired();
        self.signal.is_held()
    }

    /// Resolves when the lock is lost, with the reason. Stays pending while
    /// the lock is held.
    pub async fn lost(&self) -> LossReason {
        self.signal.lost().await
    }

    /// A `'static` handle on the lost signal, to move into other tasks.
    pub fn loss_signal(&self) -> LossSignal {
        self.signal.clone()
    }

    /// Renews the lease now (renewal also runs by itself). Fails with
    /// [`LockError::Lost`] if the lock is no longer ours.
    pub async fn extend(&self) -> Result<(), LockError> {
        if let Some(reason) = self.signal.loss_reason() {
            return Err(LockError::lost(self.key(), reason));
        }
        let span =
            tracing::debug_span!("distlock.extend", backend = self.backend, key = %self.name.key());
        self.lease.renew_once().instrument(span).await
    }

    /// Releases the lock. Returns [`LockError::Lost`] if the lock had been
    /// lost before (then nothing of another owner's is touched). Other
    /// errors mean the store could not be told: the lock then stays taken
    /// until the store frees it by itself (ttl expiry, end of the session,
    /// or — for local files — the end of this process).
    ///
    /// If this call is cancelled, the release continues in the background.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.stop_renewal();
        let span = tracing::debug_span!(
            "distlock.release",
            backend = self.backend,
            namespace = %self.name.namespace(),
            key = %self.name.key(),
            token = self.token.get(),
        );
        // A loss known before the release is the answer. From here on the
        // store's answer is: a renewal still in flight may find the lock
        // gone because this release deleted it, which is no loss, and is
        // not reported as one.
        let earlier_loss = self.signal.loss_reason();
        self.lease.reporter.mark_released();
        // `finished` is set only after the store answered: if this future is
        // dropped mid-way, Drop releases again (owner-checked, so harmless).
        let outcome = self.lease.held.release().instrument(span).await;
        self.finished = true;
        self.count_release(&outcome);
        match (earlier_loss, outcome) {
            (Some(reason), _) => Err(LockError::lost(self.key(), reason)),
            (None, Err(LockError::Lost { key, reason })) => Err(LockError::Lost { key, reason }),
            (None, outcome) => outcome,
        }
    }

    /// Gives up the guard without releasing the lock: renewal stops and the
    /// lock stays taken until the store expires it, as if this process had
    /// crashed (locks without expiry stay taken until the process exits).
    pub fn leak(mut self) {
        self.stop_renewal();
        self.finished = true;
        self.lease.holding.ended();
        // Keep the backend's handle alive so that dropping it does not
        // release anything (closing a lock file would).
        std::mem::forget(Arc::clone(&self.lease));
    }

    /// Counts a release that came back with `outcome` (a loss is counted
    /// when it is reported).
    fn count_release(&self, outcome: &Result<(), LockError>) {
        let holding = &self.lease.holding;
        match outcome {
            Ok(()) => holding.released(),
            Err(LockError::Lost { .. }) => {}
            Err(error) => {
                holding.labels().store_error(error);
                holding.ended();
            }
        }
    }

    fn stop_renewal(&mut self) {
        if let Some(kept) = self.kept.take() {
            kept.stop();
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.stop_renewal();
        if self.finished {
            return;
        }
        // Counted once: a lock lost before was counted then.
        self.lease.holding.released();
        let lease = Arc::clone(&self.lease);
        let span = tracing::debug_span!("distlock.drop_release", backend = self.backend, key = %self.name.key());
        spawn_detached(
            self.runtime.as_ref(),
            async move {
                lease.reporter.mark_released();
                match lease.held.release().await {
                    Ok(()) | Err(LockError::Lost { .. }) => {}
                    Err(error) => {
                        tracing::warn!(%error, "distlock: background release failed; the lock will expire")
                    }
                }
            }
            .instrument(span),
        );
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name)
            .field("owner", &self.owner)
            .field("token", &self.token)
            .field("kind", &self.kind)
            .field("held", &self.is_held())
            .finish()
    }
}
