//! Keeping a lease alive: the background task behind every guard whose
//! backend asks for [`Renewal::Lease`] or [`Renewal::Check`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::backend::{HeldLock, Renewal};
use crate::error::LockError;
use crate::loss::{LossReason, LossReporter};

/// The margin kept off a lease's validity for clock drift between this
/// process and the store: 1 % of the ttl plus 2 ms.
pub fn clock_drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The state a guard shares with its renewal task.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) held: Box<dyn HeldLock>,
    pub(crate) reporter: LossReporter,
    pub(crate) renewal: Renewal,
    pub(crate) ttl: Duration,
    /// The lock's name as shown in errors.
    pub(crate) key: String,
    /// When the request that took the lock was sent.
    requested_at: Instant,
    /// For [`Renewal::Lease`]: until when the lock is surely ours.
    valid_until: Mutex<Instant>,
}

impl Lease {
    pub(crate) fn new(
        key: String,
        held: Box<dyn HeldLock>,
        reporter: LossReporter,
        renewal: Renewal,
        ttl: Duration,
        requested_at: Instant,
    ) -> Self {
        Self {
            key,
            held,
            reporter,
            renewal,
            ttl,
            requested_at,
            valid_until: Mutex::new(requested_at + ttl.saturating_sub(clock_drift(ttl))),
        }
    }

    fn valid_until(&self) -> Instant {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// For a [`Renewal::Lease`] whose validity window closed before the
    /// lock was even handed to its guard (the store's reply came later than
    /// the ttl allows): reports the loss now, so that no guard shows a lock
    /// as held that another client may already have.
    pub(crate) fn report_if_already_expired(&self) {
        if self.renewal == Renewal::Lease && Instant::now() >= self.valid_until() {
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
                        self.reporter.report(LossReason::ValidityExpired);
                        return Err(LockError::lost(
                            self.key.clone(),
                            LossReason::ValidityExpired,
                        ));
                    }
                }
            }
            Renewal::Managed | Renewal::Check { .. } => self.held.renew(self.ttl).await,
        };
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

/// Starts the background task that keeps `lease` alive, if its renewal
/// mode needs one. The task ends when the lock is lost; the guard aborts it
/// on release or drop.
pub(crate) fn start(
    lease: &Arc<Lease>,
    auto_renew: bool,
    span: tracing::Span,
) -> Option<JoinHandle<()>> {
    let lease = Arc::clone(lease);
    let task = match lease.renewal {
        Renewal::Managed => return None,
        Renewal::Lease => tokio::spawn(keep_alive(lease, auto_renew).instrument(span)),
        Renewal::Check { interval } => {
            tokio::spawn(check_periodically(lease, interval).instrument(span))
        }
    };
    Some(task)
}

/// The work of a [`Renewal::Lease`] task: renew the lease, or, without
/// auto-renewal, only report its end.
pub(crate) async fn keep_alive(lease: Arc<Lease>, auto_renew: bool) {
    if auto_renew {
        renew_lease(lease).await;
    } else {
        watch_validity(lease).await;
    }
}

/// Renews at ttl/3 from the request that took the lock; a failed renewal
/// is retried sooner, until the validity window closes, at which point the
/// lock is reported lost *before* the store could have handed it to
/// anyone else.
async fn renew_lease(lease: Arc<Lease>) {
    let interval = lease.ttl / 3;
    let retry = (lease.ttl / 10).max(Duration::from_millis(10));
    let mut next = lease.requested_at + interval;
    loop {
        let valid_until = lease.valid_until();
        tokio::select! {
            () = tokio::time::sleep_until(next.into()) => {}
            () = tokio::time::sleep_until(valid_until.into()) => {
                // Only an extend() can have moved the window meanwhile.
                if Instant::now() >= lease.valid_until() {
                    lease.reporter.report(LossReason::ValidityExpired);
                    return;
                }
                continue;
            }
        }
        let span = tracing::debug_span!("distlock.renew");
        match lease.renew_once().instrument(span).await {
            Ok(()) => next = Instant::now() + interval,
            Err(LockError::Lost { .. }) => return,
            Err(error) => {
                tracing::warn!(%error, "distlock: renewal failed, retrying");
                next = Instant::now() + retry;
            }
        }
    }
}

/// For leases that are not renewed automatically: report the loss when the
/// validity window (moved only by `extend`) closes.
async fn watch_validity(lease: Arc<Lease>) {
    loop {
        let valid_until = lease.valid_until();
        tokio::time::sleep_until(valid_until.into()).await;
        if Instant::now() >= lease.valid_until() {
            lease.reporter.report(LossReason::ValidityExpired);
            return;
        }
    }
}

/// For locks that do not expire: check every `interval` that they still stand.
async fn check_periodically(lease: Arc<Lease>, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        match lease.renew_once().await {
            Ok(()) => {}
            Err(LockError::Lost { .. }) => return,
            Err(error) => tracing::warn!(%error, "distlock: lock check failed, retrying"),
        }
    }
}
