//! [`LockInfo`]: who holds a lock.

use std::time::Duration;

use crate::token::FencingToken;

/// Who holds a lock, as reported by [`Locker::inspect`](crate::Locker::inspect).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The holder's owner id (`hostname/pid/uuid` for distlock holders).
    pub owner: String,
    /// The holder's fencing token.
    pub token: FencingToken,
    /// Time left on the holder's lease, where the store knows it.
    pub ttl_left: Option<Duration>,
}

impl LockInfo {
    /// Describes a held lock.
    pub fn new(owner: impl Into<String>, token: FencingToken, ttl_left: Option<Duration>) -> Self {
        Self {
            owner: owner.into(),
            token,
            ttl_left,
        }
    }
}
