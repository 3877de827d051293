//! What lock-core records through the [`metrics`] facade (cargo feature
//! `metrics`, on by default), once for every store and primitive.
//!
//! Without a recorder installed each record is a call into the facade's
//! no-op recorder; without the feature it compiles to nothing. Labels are
//! `store`, `namespace` and `kind` (`lock`, `read`, `write`, `permit`,
//! `leader`), plus `outcome`, `reason`, `result` or `error` where a metric
//! says so. A key never becomes a label: keys are unbounded.

use std::time::Duration;
#[cfg(feature = "metrics")]
use std::time::Instant;

#[cfg(feature = "metrics")]
use std::sync::atomic::{AtomicBool, Ordering};

#[cfg(feature = "metrics")]
mod keys;
mod names;

use crate::error::LockError;
use crate::key::Namespace;
use crate::loss_reason::LossReason;
use crate::taking::Taking;

#[cfg(feature = "metrics")]
pub(crate) use keys::MetricKeys;
#[cfg(all(test, feature = "metrics"))]
use names::SERIES;
pub use names::{
    ACQUIRE_WAIT_SECONDS, ACQUISITIONS_TOTAL, ALL, HOLD_SECONDS, LOCKS_HELD, LOSSES_TOTAL,
    RELEASES_TOTAL, RENEWALS_TOTAL, STORE_ERRORS_TOTAL, WAITERS,
};

/// Nothing to keep when metrics are compiled out.
#[cfg(not(feature = "metrics"))]
#[derive(Clone, Debug, Default)]
pub(crate) struct MetricKeys {
    _none: (),
}

/// Where the records of lock-core say they come from, as the `metrics`
/// macros would.
#[cfg(feature = "metrics")]
static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// The labels every metric of one acquisition carries, as keys built
/// ahead (see [`keys`]).
#[derive(Clone, Debug)]
pub(crate) struct Labels {
    #[cfg(feature = "metrics")]
    keys: std::sync::Arc<keys::KeyTable>,
}

impl Labels {
    /// The labels of a `taking` acquisition on `store` in `namespace`,
    /// from the locker's `keys`.
    pub(crate) fn new(
        keys: &MetricKeys,
        store: &'static str,
        namespace: &Namespace,
        taking: Taking,
    ) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = (keys, store, namespace, taking);
        Self {
            #[cfg(feature = "metrics")]
            keys: keys.table(store, namespace, taking),
        }
    }

    fn count(&self, name: &'static str, extra: Option<(&'static str, &'static str)>) {
        #[cfg(feature = "metrics")]
        {
            let key = self.keys.key(name, extra);
            metrics::with_recorder(|r| r.register_counter(&key, &METADATA)).increment(1);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (name, extra);
    }

    fn gauge(&self, name: &'static str, change: f64) {
        #[cfg(feature = "metrics")]
        {
            let key = self.keys.key(name, None);
            metrics::with_recorder(|r| r.register_gauge(&key, &METADATA)).increment(change);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (name, change);
    }

    fn seconds(
        &self,
        name: &'static str,
        extra: Option<(&'static str, &'static str)>,
        d: Duration,
    ) {
        #[cfg(feature = "metrics")]
        {
            let key = self.keys.key(name, extra);
            metrics::with_recorder(|r| r.register_histogram(&key, &METADATA))
                .record(d.as_secs_f64());
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (name, extra, d);
    }

    /// A store error met while `doing` something (counted by its kind).
    pub(crate) fn store_error(&self, error: &LockError) {
        if let Some(kind) = error_kind(error) {
            self.count(STORE_ERRORS_TOTAL, Some(("error", kind)));
        }
    }

    /// A renewal or check came back with `outcome`.
    pub(crate) fn renewal(&self, outcome: &Result<(), LockError>) {
        let result = match outcome {
            Ok(()) => "ok",
            Err(LockError::Lost { .. }) => "lost",
            Err(error) => {
                self.store_error(error);
                "error"
            }
        };
        self.count(RENEWALS_TOTAL, Some(("result", result)));
    }

    /// An acquisition that began `waited` ago ended: with a lock, without
    /// one (`Ok(false)`: the wait ran out or the lock was busy), or with
    /// an error.
    pub(crate) fn acquire_ended(&self, waited: Duration, outcome: Result<bool, &LockError>) {
        let outcome = match outcome {
            Ok(true) => "acquired",
            Ok(false) => "timeout",
            Err(error) => {
                self.store_error(error);
                "error"
            }
        };
        self.seconds(ACQUIRE_WAIT_SECONDS, Some(("outcome", outcome)), waited);
    }
}

/// The `error` label of a store error; `None` for an outcome that is not
/// a failure of the store (a lost lock, a timeout).
fn error_kind(error: &LockError) -> Option<&'static str> {
    Some(match error {
        LockError::Unavailable { .. } => "unavailable",
        LockError::Backend { .. } => "backend",
        LockError::InvalidConfig { .. } => "invalid_config",
        LockError::PermissionDenied { .. } => "permission_denied",
        LockError::NotSupported { .. } => "not_supported",
        LockError::Lost { .. } | LockError::Timeout { .. } => return None,
        _ => "other",
    })
}

/// The `reason` label of a loss.
fn loss_reason(reason: LossReason) -> &'static str {
    match reason {
        LossReason::RenewalRefused => "renewal_refused",
        LossReason::ValidityExpired => "validity_expired",
        LossReason::SessionExpired => "session_expired",
        LossReason::TakenAway => "taken_away",
    }
}

/// Counts one waiting acquisition in [`WAITERS`] while it lives (dropped
/// with a cancelled call too).
pub(crate) struct Waiting<'a> {
    labels: Option<&'a Labels>,
}

impl<'a> Waiting<'a> {
    /// Counts a waiter if `may_wait`.
    pub(crate) fn start(labels: &'a Labels, may_wait: bool) -> Self {
        let labels = may_wait.then_some(labels);
        if let Some(labels) = labels {
            labels.gauge(WAITERS, 1.0);
        }
        Self { labels }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(labels) = self.labels {
            labels.gauge(WAITERS, -1.0);
        }
    }
}

/// One held lock, as the metrics see it: counted in [`LOCKS_HELD`] from
/// its acquisition until its release or its loss, whichever comes first.
#[derive(Debug)]
pub(crate) struct Holding {
    labels: Labels,
    #[cfg(feature = "metrics")]
    since: Instant,
    #[cfg(feature = "metrics")]
    counted: AtomicBool,
}

impl Holding {
    /// A lock just taken.
    pub(crate) fn start(labels: Labels) -> Self {
        labels.count(ACQUISITIONS_TOTAL, None);
        labels.gauge(LOCKS_HELD, 1.0);
        Self {
            labels,
            #[cfg(feature = "metrics")]
            since: Instant::now(),
            #[cfg(feature = "metrics")]
            counted: AtomicBool::new(true),
        }
    }

    /// The labels of this lock's metrics.
    pub(crate) fn labels(&self) -> &Labels {
        &self.labels
    }

    /// Ends the hold, neither released nor lost (the store could not be
    /// told, or the guard was leaked); counted once.
    pub(crate) fn ended(&self) {
        self.end();
    }

    /// Ends the hold once; true the first time.
    fn end(&self) -> bool {
        #[cfg(feature = "metrics")]
        {
            if !self.counted.swap(false, Ordering::AcqRel) {
                return false;
            }
            self.labels.gauge(LOCKS_HELD, -1.0);
            self.labels
                .seconds(HOLD_SECONDS, None, self.since.elapsed());
        }
        true
    }

    /// The holder gave the lock back while it was held.
    pub(crate) fn released(&self) {
        if self.end() {
            self.labels.count(RELEASES_TOTAL, None);
        }
    }

    /// The lock is known lost.
    pub(crate) fn lost(&self, reason: LossReason) {
        if self.end() {
            let reason = loss_reason(reason);
            self.labels.count(LOSSES_TOTAL, Some(("reason", reason)));
        }
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::*;

    /// Every label value recorded is in [`SERIES`], so its key is built
    /// ahead rather than for each record.
    #[test]
    fn every_recorded_label_is_built_ahead() {
        let built = |name, extra| SERIES.contains(&(name, Some(extra)));
        for reason in [
            LossReason::RenewalRefused,
            LossReason::ValidityExpired,
            LossReason::SessionExpired,
            LossReason::TakenAway,
        ] {
            assert!(built(LOSSES_TOTAL, ("reason", loss_reason(reason))));
        }
        for error in [
            LockError::unavailable("x", "y"),
            LockError::backend("x", "y"),
            LockError::invalid_config("x"),
            LockError::permission_denied("x", "y"),
            LockError::not_supported("mem", "x"),
            LockError::InvalidKey {
                reason: String::new(),
            },
        ] {
            let kind = error_kind(&error).expect("a store error");
            assert!(built(STORE_ERRORS_TOTAL, ("error", kind)), "{kind}");
        }
    }
}
