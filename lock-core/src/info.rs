//! [`LockInfo`]: who holds a lock.

use std::time::Duration;

use crate::token::FencingToken;

/// Who holds a lock, as reported by [`Locker::inspect`](crate::Locker::inspect)
/// and [`Locker::watch`](crate::Locker::watch).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The holder's owner id (`hostname/pid/uuid` for distlock holders).
    pub owner: String,
    /// The holder's fencing token.
    pub token: FencingToken,
    /// Time left on the holder's lease, where the store knows it.
    pub ttl_left: Option<Duration>,
    /// The value the holder stored with the lock
    /// ([`LockOptions::value`](crate::LockOptions::value),
    /// [`LockGuard::set_value`](crate::LockGuard::set_value)); empty if it
    /// set none.
    pub value: String,
}

impl LockInfo {
    /// Describes a held lock that carries no value.
    pub fn new(owner: impl Into<String>, token: FencingToken, ttl_left: Option<Duration>) -> Self {
        Self {
            owner: owner.into(),
            token,
            ttl_left,
            value: String::new(),
        }
    }

    /// The same description with the holder's `value`.
    pub fn with_value(mut self, value: impl Into<String>) -> Self {
        self.value = value.into();
        self
    }

    /// Whether `other` describes the same holder with the same value: the
    /// same owner, token and value (the time left may differ).
    pub fn same_state(&self, other: &LockInfo) -> bool {
        self.owner == other.owner && self.token == other.token && self.value == other.value
    }
}
