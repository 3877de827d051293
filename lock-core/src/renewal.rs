//! A guard's lease: what its store handed over, its validity window, and
//! one renewal. The [`keeper`](crate::keeper) decides when to renew.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::backend::{clock_drift, HeldLock, Renewal};
use crate::error::LockError;
use crate::loss::LossReporter;
use crate::loss_reason::LossReason;
use crate::telemetry::Holding;

/// The state a guard shares with its renewal task.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) held: Box<dyn HeldLock>,
    pub(crate) reporter: LossReporter,
    pub(crate) renewal: Renewal,
    pub(crate) ttl: Duration,
    /// The lock's name as shown in errors.
    pub(crate) key: String,
    /// The lock's metrics.
    pub(crate) holding: Arc<Holding>,
    /// When the request that took the lock was sent.
    requested_at: Instant,
    /// For [`Renewal::Lease`]: until when the lock is surely ours.
    valid_until: Mutex<Instant>,
}

impl Lease {
    pub(crate) fn new(
        key: String,
        holding: Arc<Holding>,
        held: Box<dyn HeldLock>,
        reporter: LossReporter,
        renewal: Renewal,
        ttl: Duration,
        requested_at: Instant,
    ) -> Self {
        Self {
            key,
            holding,
            held,
            reporter,
            renewal,
            ttl,
            requested_at,
            valid_until: Mutex::new(requested_at + ttl.saturating_sub(clock_drift(ttl))),
        }
    }

    /// When the request that took the lock was sent.
    pub(crate) fn requested_at(&self) -> Instant {
        self.requested_at
    }

    /// Until when the lock is surely ours (for [`Renewal::Lease`]).
    pub(crate) fn valid_until(&self) -> Instant {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// For a lease whose validity window has closed (ours for a
    /// [`Renewal::Lease`], the store's session for a [`Renewal::Managed`]
    /// lock whose backend knows it): reports
    /// the loss now, without waiting for the keeper's timer, so that no
    /// guard shows a lock as held that another client may already have —
    /// when the store's reply came later than the ttl allows, or when the
    /// process was frozen past the window and runs again before its timers.
    pub(crate) fn report_if_expired(&self) {
        let until = match self.renewal {
            Renewal::Lease => Some(self.valid_until()),
            Renewal::Managed => self.held.valid_until(),
            Renewal::Check { .. } => None,
        };
        if until.is_some_and(|until| Instant::now() >= until) {
            self.reporter.report(LossReason::ValidityExpired);
        }
    }

    /// Records a successful renewal whose request was sent at `sent`.
    fn renewed(&self, sent: Instant) {
        let until = sent + self.ttl.saturating_sub(clock_drift(self.ttl));
        let mut valid_until = self.valid_until.lock().unwrap_or_else(|p| p.into_inner());
        *valid_until = (*valid_until).max(until);
    }

    /// Renews once, bounded by the validity window; updates it on success
    /// and reports the loss when the store refuses.
    pub(crate) async fn renew_once(&self) -> Result<(), LockError> {
        let sent = Instant::now();
        let outcome = match self.renewal {
            Renewal::Lease => {
                let deadline = self.valid_until();
                match tokio::time::timeout_at(deadline.into(), self.held.renew(self.ttl)).await {
                    Ok(outcome) => outcome,
                    Err(_) => {
                        let lost = LockError::lost(self.key.clone(), LossReason::ValidityExpired);
                        let outcome = Err(lost);
                        self.holding.labels().renewal(&outcome);
                        self.reporter.report(LossReason::ValidityExpired);
                        return outcome;
                    }
                }
            }
            Renewal::Managed | Renewal::Check { .. } => self.held.renew(self.ttl).await,
        };
        self.holding.labels().renewal(&outcome);
        match outcome {
            Ok(()) => {
                self.renewed(sent);
                Ok(())
            }
            Err(LockError::Lost { key, reason }) => {
                self.reporter.report(reason);
                Err(LockError::Lost { key, reason })
            }
            Err(other) => Err(other),
        }
    }
}
