//! The names of the metrics lock-core records, and every series (name
//! and extra label) it records them with.

/// An extra label of one record: `(name, value)`.
#[cfg(feature = "metrics")]
pub(crate) type Extra = Option<(&'static str, &'static str)>;

/// Histogram: seconds from the call to the lock being taken or the call
/// giving up; label `outcome` = `acquired`, `timeout` (also a refused
/// `try_*` call) or `error`.
pub const ACQUIRE_WAIT_SECONDS: &str = "distlock_acquire_wait_seconds";
/// Histogram: seconds a lock was held, from its acquisition to its release
/// or its loss.
pub const HOLD_SECONDS: &str = "distlock_hold_seconds";
/// Counter: locks taken.
pub const ACQUISITIONS_TOTAL: &str = "distlock_acquisitions_total";
/// Counter: locks given back by their holder while still held (a release
/// call, or a guard dropped).
pub const RELEASES_TOTAL: &str = "distlock_releases_total";
/// Counter: held locks known lost; label `reason` = `renewal_refused`,
/// `validity_expired`, `session_expired` or `taken_away`.
pub const LOSSES_TOTAL: &str = "distlock_losses_total";
/// Counter: lease renewals and checks; label `result` = `ok`, `lost`
/// (the store said the lock is not ours) or `error`.
pub const RENEWALS_TOTAL: &str = "distlock_renewals_total";
/// Counter: errors from the store while acquiring, renewing or releasing;
/// label `error` = `unavailable`, `backend`, `invalid_config`,
/// `permission_denied`, `not_supported` or `other`.
pub const STORE_ERRORS_TOTAL: &str = "distlock_store_errors_total";
/// Gauge: locks held now (taken and neither released nor lost).
pub const LOCKS_HELD: &str = "distlock_locks_held";
/// Gauge: acquisitions waiting now (calls that may wait, until they
/// return).
pub const WAITERS: &str = "distlock_waiters";

/// Every metric name, for exporters and tests.
pub const ALL: [&str; 9] = [
    ACQUIRE_WAIT_SECONDS,
    HOLD_SECONDS,
    ACQUISITIONS_TOTAL,
    RELEASES_TOTAL,
    LOSSES_TOTAL,
    RENEWALS_TOTAL,
    STORE_ERRORS_TOTAL,
    LOCKS_HELD,
    WAITERS,
];

/// Every series lock-core records, beyond the base labels: what a locker
/// builds its metric keys for ahead (see [`super::keys`]). The label values
/// are those [`super::Labels`] and [`super::Holding`] record.
#[cfg(feature = "metrics")]
pub(crate) const SERIES: &[(&str, Extra)] = &[
    (ACQUIRE_WAIT_SECONDS, Some(("outcome", "acquired"))),
    (ACQUIRE_WAIT_SECONDS, Some(("outcome", "timeout"))),
    (ACQUIRE_WAIT_SECONDS, Some(("outcome", "error"))),
    (HOLD_SECONDS, None),
    (ACQUISITIONS_TOTAL, None),
    (RELEASES_TOTAL, None),
    (LOSSES_TOTAL, Some(("reason", "renewal_refused"))),
    (LOSSES_TOTAL, Some(("reason", "validity_expired"))),
    (LOSSES_TOTAL, Some(("reason", "session_expired"))),
    (LOSSES_TOTAL, Some(("reason", "taken_away"))),
    (RENEWALS_TOTAL, Some(("result", "ok"))),
    (RENEWALS_TOTAL, Some(("result", "lost"))),
    (RENEWALS_TOTAL, Some(("result", "error"))),
    (STORE_ERRORS_TOTAL, Some(("error", "unavailable"))),
    (STORE_ERRORS_TOTAL, Some(("error", "backend"))),
    (STORE_ERRORS_TOTAL, Some(("error", "invalid_config"))),
    (STORE_ERRORS_TOTAL, Some(("error", "permission_denied"))),
    (STORE_ERRORS_TOTAL, Some(("error", "not_supported"))),
    (STORE_ERRORS_TOTAL, Some(("error", "other"))),
    (LOCKS_HELD, None),
    (WAITERS, None),
];
