//! The lost signal: how a guard learns that its lock is no longer held.
//!
//! A backend (or lock-core's renewal task) holds a [`LossReporter`] for each
//! lock and calls [`LossReporter::report`] once it knows the lock is gone.
//! The guard and anyone holding a [`LossSignal`] see it at once.

use std::fmt;
use std::sync::{Arc, OnceLock};

use tokio::sync::watch;

use crate::loss_reason::LossReason;
use crate::telemetry::Holding;

/// Where a lock stands, from its guard's point of view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LockState {
    Held,
    Lost(LossReason),
    Released,
}

/// Reports the loss of one lock. Cheap to clone; backends keep one per held
/// lock (for example in a session's list of locks).
#[derive(Clone)]
pub struct LossReporter {
    state: Arc<watch::Sender<LockState>>,
    /// The held lock's metrics, once it is held.
    holding: Arc<OnceLock<Arc<Holding>>>,
}

impl LossReporter {
    /// Marks the lock lost for `reason`. Returns true if this call changed
    /// the state (the first report wins; a released lock is never marked
    /// lost).
    pub fn report(&self, reason: LossReason) -> bool {
        let changed = self.state.send_if_modified(|state| {
            if *state != LockState::Held {
                return false;
            }
            *state = LockState::Lost(reason);
            // Counted before anyone waiting on the signal can look.
            if let Some(holding) = self.holding.get() {
                holding.lost(reason);
            }
            true
        });
        if changed {
            tracing::warn!(%reason, "distlock: lock lost");
        }
        changed
    }

    /// True while the lock is neither lost nor released.
    pub fn is_held(&self) -> bool {
        *self.state.borrow() == LockState::Held
    }

    /// True once nobody can observe the signal any more (the guard and all
    /// [`LossSignal`]s are gone); backends may then forget the reporter.
    pub fn is_abandoned(&self) -> bool {
        self.state.receiver_count() == 0
    }

    /// Counts a loss reported from now on in `holding`'s metrics.
    pub(crate) fn attach(&self, holding: Arc<Holding>) {
        let _ = self.holding.set(holding);
    }

    /// Marks the lock released by its owner; later reports are ignored.
    pub(crate) fn mark_released(&self) {
        self.state.send_if_modified(|state| {
            let was_held = *state == LockState::Held;
            if was_held {
                *state = LockState::Released;
            }
            was_held
        });
    }
}

impl fmt::Debug for LossReporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LossReporter")
            .field("state", &*self.state.borrow())
            .finish()
    }
}

/// Observes the loss of one lock; cheap to clone, `'static`, so it can be
/// moved into a task that must stop when the lock is lost.
#[derive(Clone)]
pub struct LossSignal {
    state: watch::Receiver<LockState>,
}

impl LossSignal {
    /// Resolves with the reason once the lock is lost. Never resolves if the
    /// lock is released by its owner instead.
    pub async fn lost(&self) -> LossReason {
        let mut state = self.state.clone();
        let seen = state
            .wait_for(|s| matches!(s, LockState::Lost(_)))
            .await
            .map(|s| *s);
        match seen {
            Ok(LockState::Lost(reason)) => reason,
            // Released, or the reporter is gone without a loss: never lost.
            _ => std::future::pending().await,
        }
    }

    /// True while the lock is neither lost nor released.
    pub fn is_held(&self) -> bool {
        *self.state.borrow() == LockState::Held
    }

    /// The reason, once the lock is known to be lost.
    pub fn loss_reason(&self) -> Option<LossReason> {
        match *self.state.borrow() {
            LockState::Lost(reason) => Some(reason),
            _ => None,
        }
    }
}

impl fmt::Debug for LossSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LossSignal")
            .field("state", &*self.state.borrow())
            .finish()
    }
}

/// A connected reporter and signal for a lock that is held now.
pub fn loss_channel() -> (LossReporter, LossSignal) {
    let (tx, rx) = watch::channel(LockState::Held);
    (
        LossReporter {
            state: Arc::new(tx),
            holding: Arc::default(),
        },
        LossSignal { state: rx },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn first_report_wins_and_wakes_observers() {
        let (reporter, signal) = loss_channel();
        let waiter = tokio::spawn({
            let signal = signal.clone();
            async move { signal.lost().await }
        });
        assert!(signal.is_held());
        assert!(reporter.report(LossReason::TakenAway));
        assert!(!reporter.report(LossReason::ValidityExpired));
        assert_eq!(waiter.await.unwrap(), LossReason::TakenAway);
        assert!(!signal.is_held());
        assert_eq!(signal.loss_reason(), Some(LossReason::TakenAway));
    }

    #[tokio::test]
    async fn released_lock_is_never_lost() {
        let (reporter, signal) = loss_channel();
        reporter.mark_released();
        assert!(!reporter.report(LossReason::TakenAway));
        assert_eq!(signal.loss_reason(), None);
        let waited = tokio::time::timeout(Duration::from_millis(50), signal.lost()).await;
        assert!(waited.is_err(), "lost() must not resolve after release");
    }

    #[test]
    fn abandoned_once_all_signals_are_dropped() {
        let (reporter, signal) = loss_channel();
        assert!(!reporter.is_abandoned());
        drop(signal);
        assert!(reporter.is_abandoned());
    }
}
