//! The one error type of the lock API.

use std::error::Error as StdError;
use std::time::Duration;

use crate::limits::MAX_SEMAPHORE_LIMIT;
use crate::loss_reason::LossReason;

/// A boxed error from a store client, kept as the `source` of a [`LockError`].
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Everything that can go wrong when taking, keeping or releasing a lock.
///
/// Variants are grouped by what the caller can do about them:
/// fix the input ([`InvalidKey`](Self::InvalidKey),
/// [`InvalidValue`](Self::InvalidValue), [`InvalidLimit`](Self::InvalidLimit),
/// [`LimitMismatch`](Self::LimitMismatch),
/// [`InvalidConfig`](Self::InvalidConfig)), decide whether to wait longer
/// ([`Timeout`](Self::Timeout)), stop relying on the lock
/// ([`Lost`](Self::Lost)), retry later ([`Unavailable`](Self::Unavailable)),
/// fix the credentials or permissions
/// ([`PermissionDenied`](Self::PermissionDenied)),
/// choose another way ([`NotSupported`](Self::NotSupported)), or report a
/// bug or misconfiguration ([`Backend`](Self::Backend)).
///
/// Neither `Display` nor `Debug` ever contains credentials: backends strip
/// user info from URLs before they put anything into an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The key or namespace breaks the key rules; nothing was sent to the store.
    #[error("invalid key: {reason}")]
    InvalidKey {
        /// What is wrong with the key, naming the offending part.
        reason: String,
    },
    /// A holder value breaks the value rules (UTF-8, at most
    /// [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN) bytes); nothing was sent to the store.
    #[error("invalid value: {reason}")]
    InvalidValue {
        /// What is wrong with the value.
        reason: String,
    },
    /// A semaphore limit outside 1 to
    /// [`MAX_SEMAPHORE_LIMIT`]; nothing was
    /// sent to the store.
    #[error(
        "invalid semaphore limit {limit}: it must be 1 to {}",
        MAX_SEMAPHORE_LIMIT
    )]
    InvalidLimit {
        /// The limit asked for.
        limit: u32,
    },
    /// The semaphore's permits are held under another limit than the one
    /// asked for; nothing was taken. Every user of a semaphore must agree
    /// on its limit while any permit is held.
    #[error("semaphore `{key}` is held with a limit of {stored} permits, not {asked}")]
    LimitMismatch {
        /// The semaphore's name.
        key: String,
        /// The limit its holders took their permits under.
        stored: u32,
        /// The limit of this request.
        asked: u32,
    },
    /// A bad URL, option or value, or a backend that was not compiled in.
    #[error("invalid configuration: {reason}")]
    InvalidConfig {
        /// What is wrong and, where possible, how to fix it.
        reason: String,
    },
    /// The lock was still held by someone else when the wait ran out.
    #[error("timed out after {} waiting for lock `{key}`", humantime::format_duration(*.waited))]
    Timeout {
        /// The key that could not be taken.
        key: String,
        /// How long the call waited.
        waited: Duration,
    },
    /// The lock is no longer ours (expired, taken away, session lost).
    ///
    /// Work done under this lock since the loss may have overlapped with
    /// another holder; fencing tokens let a resource reject it.
    #[error("lock `{key}` was lost: {reason}")]
    Lost {
        /// The key of the lost lock.
        key: String,
        /// Why the lock is known to be lost.
        reason: LossReason,
    },
    /// The store cannot do this operation at all (for example removing
    /// another owner's lock on a store without that power). Retrying will
    /// not help; the store's capabilities say what it can do.
    #[error("the {store} store does not support {operation}")]
    NotSupported {
        /// The store's short name (`file`, `redis`).
        store: &'static str,
        /// What was asked, as a noun phrase.
        operation: &'static str,
    },
    /// The store could not be reached or did not answer in time. Retriable.
    #[error("store unavailable: {message}")]
    Unavailable {
        /// What failed, without credentials.
        message: String,
        /// The client library's error.
        #[source]
        source: Option<BoxError>,
    },
    /// The store refused the credentials, or they do not allow what the
    /// lock needs: a wrong user name or password, an ACL that denies a
    /// command or a key, a lock directory this user may not write. Not
    /// retriable: fix the credentials, the ACL or the permissions.
    #[error("permission denied: {message}")]
    PermissionDenied {
        /// Who refused what, and what to change; without credentials.
        message: String,
        /// The client library's error.
        #[source]
        source: Option<BoxError>,
    },
    /// Any other failure reported by the store or its client.
    #[error("backend error: {message}")]
    Backend {
        /// What failed, without credentials.
        message: String,
        /// The client library's error.
        #[source]
        source: Option<BoxError>,
    },
}

impl LockError {
    /// An [`InvalidKey`](Self::InvalidKey) error with the given reason.
    pub fn invalid_key(reason: impl Into<String>) -> Self {
        Self::InvalidKey {
            reason: reason.into(),
        }
    }

    /// An [`InvalidConfig`](Self::InvalidConfig) error with the given reason.
    pub fn invalid_config(reason: impl Into<String>) -> Self {
        Self::InvalidConfig {
            reason: reason.into(),
        }
    }

    /// Prefixes the reason of an [`InvalidConfig`](Self::InvalidConfig)
    /// error with `context` (say, the URL with its password masked), so a
    /// message says where the problem is; other errors pass unchanged.
    pub fn in_config(self, context: &str) -> Self {
        match self {
            Self::InvalidConfig { reason } => Self::InvalidConfig {
                reason: format!("{context}: {reason}"),
            },
            other => other,
        }
    }

    /// A [`NotSupported`](Self::NotSupported) error: `store` cannot do
    /// `operation`.
    pub fn not_supported(store: &'static str, operation: &'static str) -> Self {
        Self::NotSupported { store, operation }
    }

    /// An [`Unavailable`](Self::Unavailable) error wrapping a client error.
    pub fn unavailable(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Unavailable {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// A [`PermissionDenied`](Self::PermissionDenied) error wrapping a
    /// client error.
    pub fn permission_denied(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::PermissionDenied {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// A [`Backend`](Self::Backend) error wrapping a client error.
    pub fn backend(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Backend {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// A [`Lost`](Self::Lost) error for `key`.
    pub fn lost(key: impl Into<String>, reason: LossReason) -> Self {
        Self::Lost {
            key: key.into(),
            reason,
        }
    }

    /// True for errors worth retrying later with the same input
    /// ([`Unavailable`](Self::Unavailable) only; not
    /// [`PermissionDenied`](Self::PermissionDenied), which needs other
    /// credentials or permissions).
    pub fn is_retriable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }

    /// True for [`Lost`](Self::Lost).
    pub fn is_lost(&self) -> bool {
        matches!(self, Self::Lost { .. })
    }

    /// True for [`Timeout`](Self::Timeout).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout { .. })
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = LockError> = std::result::Result<T, E>;
