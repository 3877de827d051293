//! [`Taking`]: what one acquisition takes, as the API was called (a lock,
//! a read or write lock, a permit, a leadership): the hold asked of the
//! store, the recipe a store following another client family's layout
//! uses for it, and the `kind` label of its metrics.

use crate::info::HoldKind;

/// What an acquisition takes, as the API was called
/// ([`AcquireRequest::taking`](crate::backend::AcquireRequest::taking)).
///
/// Most stores need only the hold it asks for ([`Taking::hold_kind`]): a
/// lock, a write lock and a leadership are the same exclusive hold of a
/// name. A store laid out as another client family's recipes (Curator's
/// mutex, leader latch and read-write lock name their nodes differently)
/// tells them apart by this.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Taking {
    /// `Locker::lock` and friends.
    Lock,
    /// A read lock.
    Read,
    /// A write lock.
    Write,
    /// A semaphore's permit.
    Permit {
        /// The semaphore's limit.
        limit: u32,
    },
    /// Leadership of an election.
    Leader,
}

impl Taking {
    /// The hold asked of the store.
    pub fn hold_kind(self) -> HoldKind {
        match self {
            Self::Lock | Self::Write | Self::Leader => HoldKind::Exclusive,
            Self::Read => HoldKind::Shared,
            Self::Permit { limit } => HoldKind::Permit { limit },
        }
    }

    /// The `kind` label.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Read => "read",
            Self::Write => "write",
            Self::Permit { .. } => "permit",
            Self::Leader => "leader",
        }
    }

    /// Which of a locker's key tables this kind uses.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn index(self) -> usize {
        match self {
            Self::Lock => 0,
            Self::Read => 1,
            Self::Write => 2,
            Self::Permit { .. } => 3,
            Self::Leader => 4,
        }
    }
}
