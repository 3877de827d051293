//! [`LossReason`]: why a lock is known to be lost. Errors, metrics and
//! the lost signal all name it, so it sits below each of them.

use std::fmt;

/// Why a lock is known to be lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// A renewal found the lock gone or owned by someone else.
    RenewalRefused,
    /// No renewal succeeded before the lease's validity window closed, so
    /// the store may already have handed the lock to someone else.
    ValidityExpired,
    /// The store session (or lease) that kept the lock alive expired or was
    /// revoked.
    SessionExpired,
    /// The lock was removed by someone else (an operator, a forced release,
    /// a deleted key, node or file).
    TakenAway,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::RenewalRefused => "renewal found the lock gone or owned by someone else",
            Self::ValidityExpired => "no renewal succeeded before the lease's validity ran out",
            Self::SessionExpired => "the store session or lease that kept the lock expired",
            Self::TakenAway => "the lock was removed by someone else",
        })
    }
}
