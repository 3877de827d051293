//! Settings of a locker and of a single lock call.

use std::time::Duration;

use crate::error::LockError;
use crate::key::Namespace;
use crate::limits::{MAX_SEMAPHORE_LIMIT, MAX_VALUE_LEN};

/// The lease length used when none is configured.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// The connect timeout used when none is configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Settings shared by every lock taken through one [`Locker`](crate::Locker).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockerOptions {
    /// How long a vanished holder keeps blocking others (lease length).
    pub ttl: Duration,
    /// The namespace locks live in.
    pub namespace: Namespace,
    /// How long [`Locker::lock`](crate::Locker::lock) waits by default;
    /// `None` waits until the lock is free.
    pub wait: Option<Duration>,
}

impl Default for LockerOptions {
    fn default() -> Self {
        Self {
            ttl: DEFAULT_TTL,
            namespace: Namespace::default(),
            wait: None,
        }
    }
}

/// How long one lock call may wait for a busy lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitLimit {
    /// Use the locker's default.
    Default,
    Forever,
    For(Duration),
}

/// Options of one [`Locker::lock_with`](crate::Locker::lock_with) call.
///
/// ```
/// # use std::time::Duration;
/// use lock_core::LockOptions;
/// let opts = LockOptions::new().wait(Duration::from_secs(5));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockOptions {
    pub(crate) wait: WaitLimit,
    pub(crate) auto_renew: bool,
    pub(crate) value: String,
}

impl LockOptions {
    /// The locker's defaults: its default wait, automatic renewal on.
    pub fn new() -> Self {
        Self {
            wait: WaitLimit::Default,
            auto_renew: true,
            value: String::new(),
        }
    }

    /// Wait at most `wait` for the lock, then fail with
    /// [`LockError::Timeout`]. A zero wait makes
    /// exactly one attempt.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = WaitLimit::For(wait);
        self
    }

    /// Wait until the lock is free, however long that takes.
    pub fn wait_forever(mut self) -> Self {
        self.wait = WaitLimit::Forever;
        self
    }

    /// Whether lock-core renews the lease by itself (default: yes).
    ///
    /// Without automatic renewal a lease lasts one ttl from acquisition
    /// unless [`LockGuard::extend`](crate::LockGuard::extend) is called; the
    /// guard reports it lost when it runs out. Backends whose locks live as
    /// long as a store session (etcd, ZooKeeper) ignore this, see
    /// [`Capabilities::per_lock_expiry`](crate::backend::Capabilities::per_lock_expiry).
    pub fn auto_renew(mut self, renew: bool) -> Self {
        self.auto_renew = renew;
        self
    }
}

impl LockOptions {
    /// A value stored with the lock while it is held (an address, a
    /// version, a note for operators), shown by
    /// [`Locker::inspect`](crate::Locker::inspect) and
    /// [`Locker::watch`](crate::Locker::watch). UTF-8, at most
    /// [`MAX_VALUE_LEN`] bytes; a longer value fails the lock call with
    /// [`LockError::InvalidValue`]. Empty by
    /// default.
    pub fn value(mut self, value: impl Into<String>) -> Self {
        self.value = value.into();
        self
    }
}

/// Checks a semaphore limit against 1 to [`MAX_SEMAPHORE_LIMIT`].
pub(crate) fn check_limit(limit: u32) -> Result<(), LockError> {
    if limit == 0 || limit > MAX_SEMAPHORE_LIMIT {
        return Err(LockError::InvalidLimit { limit });
    }
    Ok(())
}

/// Checks the value rules: at most [`MAX_VALUE_LEN`] bytes.
pub(crate) fn check_value(value: &str) -> Result<(), LockError> {
    if value.len() > MAX_VALUE_LEN {
        return Err(LockError::InvalidValue {
            reason: format!(
                "the value is {} bytes long; at most {MAX_VALUE_LEN} bytes are allowed",
                value.len()
            ),
        });
    }
    Ok(())
}

impl Default for LockOptions {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod value_tests {
    use super::*;

    #[test]
    fn values_up_to_the_limit_are_accepted() {
        assert!(check_value("").is_ok());
        assert!(check_value(&"é".repeat(MAX_VALUE_LEN / 2)).is_ok());
        let error = check_value(&"x".repeat(MAX_VALUE_LEN + 1)).unwrap_err();
        assert!(matches!(error, LockError::InvalidValue { .. }));
        assert!(error.to_string().contains("4097 bytes"), "{error}");
        assert!(error.to_string().contains("4096"), "{error}");
    }
}
