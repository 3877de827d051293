//! Refusals in test assertions: an error of the kind a refused call must
//! give, saying why in words a user can act on.

use lock_core::LockError;

/// The kinds of [`LockError`] a refusal can be, for [`assert_refused`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// [`LockError::PermissionDenied`]: credentials or rights refused.
    PermissionDenied,
    /// [`LockError::InvalidConfig`]: the configuration cannot work (a
    /// certificate missing or not trusted, say).
    InvalidConfig,
}

impl Refused {
    /// Whether `error` is of this kind.
    pub fn matches(self, error: &LockError) -> bool {
        match self {
            Refused::PermissionDenied => matches!(error, LockError::PermissionDenied { .. }),
            Refused::InvalidConfig => matches!(error, LockError::InvalidConfig { .. }),
        }
    }
}

/// Panics unless `error` is of kind `kind` and its message contains every
/// one of `says`; returns the message, for further checks.
#[track_caller]
pub fn assert_refused(error: &LockError, kind: Refused, says: &[&str]) -> String {
    assert!(kind.matches(error), "expected {kind:?}, got {error:?}");
    let text = error.to_string();
    for part in says {
        assert!(text.contains(part), "{part:?} missing from: {text}");
    }
    text
}
