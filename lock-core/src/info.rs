//! [`LockInfo`]: who holds a lock, and [`HoldKind`]: how.

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
    /// How it holds: alone (a lock, a leadership, a write lock), shared
    /// with other readers (a read lock), or as one of a semaphore's
    /// permits.
    pub kind: HoldKind,
}

/// How a guard holds its name.
///
/// A name has one lock, which a read-write lock of that name shares: a
/// plain lock, a leadership and a write lock are the same exclusive hold,
/// and read locks of the name are shared holds of the same lock (so
/// `distlock run KEY` and `distlock run KEY --shared` exclude each other,
/// as `flock` and `flock -s` do). A semaphore of the name is a separate
/// object: its permits do not exclude the lock's holders.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HoldKind {
    /// The only holder: a lock, a leadership or a write lock.
    #[default]
    Exclusive,
    /// One of the readers of a read-write lock: shared with other
    /// readers, never with an exclusive holder.
    Shared,
    /// One of at most `limit` holders of the semaphore of the name.
    Permit {
        /// The semaphore's limit.
        limit: u32,
    },
}

impl HoldKind {
    /// `"exclusive"`, `"shared"` or `"permit"`, as `distlock status` and
    /// traces name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exclusive => "exclusive",
            Self::Shared => "shared",
            Self::Permit { .. } => "permit",
        }
    }

    /// Whether this is a semaphore's permit rather than a hold of the lock.
    pub fn is_permit(self) -> bool {
        matches!(self, Self::Permit { .. })
    }
}

impl LockInfo {
    /// Describes a held lock that carries no value.
    pub fn new(owner: impl Into<String>, token: FencingToken, ttl_left: Option<Duration>) -> Self {
        Self {
            owner: owner.into(),
            token,
            ttl_left,
            value: String::new(),
            kind: HoldKind::Exclusive,
        }
    }

    /// The same description with the holder's `kind`.
    pub fn with_kind(mut self, kind: HoldKind) -> Self {
        self.kind = kind;
        self
    }

    /// The same description with the holder's `value`.
    pub fn with_value(mut self, value: impl Into<String>) -> Self {
        self.value = value.into();
        self
    }

    /// Whether `other` describes the same holder with the same value: the
    /// same owner, token, value and kind (the time left may differ).
    pub fn same_state(&self, other: &LockInfo) -> bool {
        self.owner == other.owner
            && self.token == other.token
            && self.value == other.value
            && self.kind == other.kind
    }
}
