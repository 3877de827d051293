//! What a key of a run is: a lock, an election, a semaphore or a
//! read-write lock, told by its name, so that every client process and
//! the register agree without being told separately.
//!
//! `key-<n>` is a lock, `leader-<n>` an election (its leader holds it, the
//! term is the token), `permits-<limit>-<n>` a semaphore with `limit`
//! permits (each permit holder holds it), `rw-<n>` a read-write lock
//! (taken as a reader or as the writer).

use distlock::{Leadership, LockError, LockGuard, LockOptions, Locker};

/// The permits of the semaphores a run uses.
pub const SEMAPHORE_LIMIT: u32 = 2;

/// One kind of coordination a key stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Primitive {
    /// A lock: at most one holder.
    Lock,
    /// An election: at most one leader.
    Election,
    /// A semaphore: at most `limit` permit holders.
    Semaphore {
        /// The permits.
        limit: u32,
    },
    /// A read-write lock: many readers or one writer.
    ReadWrite,
}

impl Primitive {
    /// The primitive `key` names (a lock for any name not made by
    /// [`keys`]).
    pub fn of(key: &str) -> Self {
        if key.starts_with("leader-") {
            return Primitive::Election;
        }
        if key.starts_with("rw-") {
            return Primitive::ReadWrite;
        }
        let limit = key
            .strip_prefix("permits-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|limit| limit.parse().ok());
        match limit {
            Some(limit) => Primitive::Semaphore { limit },
            None => Primitive::Lock,
        }
    }

    /// How many may hold it at once (a read-write lock: writers).
    pub fn limit(self) -> u32 {
        match self {
            Primitive::Lock | Primitive::Election | Primitive::ReadWrite => 1,
            Primitive::Semaphore { limit } => limit,
        }
    }
}

/// Of the holds of a read-write lock, how many in [`READERS_OUT_OF`] are
/// taken as a reader (the others as the writer).
pub const READERS: u32 = 2;

/// See [`READERS`].
pub const READERS_OUT_OF: u32 = 3;

/// The keys of a run: `locks` locks, one election, one semaphore of
/// [`SEMAPHORE_LIMIT`] permits where the store has semaphores, and one
/// read-write lock where it has read locks (`shared_locks`).
pub fn keys(locks: usize, semaphores: bool, shared_locks: bool) -> Vec<String> {
    let mut keys: Vec<String> = (0..locks.max(1)).map(|i| format!("key-{i}")).collect();
    keys.push("leader-0".to_owned());
    if semaphores {
        keys.push(format!("permits-{SEMAPHORE_LIMIT}-0"));
    }
    if shared_locks {
        keys.push("rw-0".to_owned());
    }
    keys
}

/// A hold of one key: a lock's, a permit's or a writer's guard, a
/// reader's guard, or a leadership.
#[derive(Debug)]
pub enum Hold {
    /// A lock, a permit or a read-write lock's write side.
    Guard(LockGuard),
    /// A read lock of a read-write lock (shared with other readers).
    Reader(LockGuard),
    /// A leadership (resigned on release).
    Leader(Leadership),
}

impl Hold {
    /// Takes `key` as its primitive says, waiting as `options` allow;
    /// `me` is the value a leader proclaims. A read-write lock is taken
    /// as a reader [`READERS`] times in [`READERS_OUT_OF`], at random.
    pub async fn take(
        locker: &Locker,
        key: &str,
        me: &str,
        options: LockOptions,
    ) -> Result<Self, LockError> {
        Ok(match Primitive::of(key) {
            Primitive::Lock => Hold::Guard(locker.lock_with(key, options).await?),
            Primitive::Election => {
                Hold::Leader(locker.election(key)?.campaign_with(me, options).await?)
            }
            Primitive::Semaphore { limit } => {
                Hold::Guard(locker.semaphore(key, limit)?.acquire_with(options).await?)
            }
            Primitive::ReadWrite => {
                let rw = locker.rwlock(key)?;
                if fastrand::u32(..READERS_OUT_OF) < READERS {
                    Hold::Reader(rw.read_with(options).await?)
                } else {
                    Hold::Guard(rw.write_with(options).await?)
                }
            }
        })
    }

    /// Whether it is a read lock (shared with other readers).
    pub fn reads(&self) -> bool {
        matches!(self, Hold::Reader(_))
    }

    /// The fencing token (a leader's term).
    pub fn token(&self) -> u64 {
        match self {
            Hold::Guard(guard) | Hold::Reader(guard) => guard.token().get(),
            Hold::Leader(leadership) => leadership.term().get(),
        }
    }

    /// Whether the hold is still ours, as far as the client knows.
    pub fn is_held(&self) -> bool {
        match self {
            Hold::Guard(guard) | Hold::Reader(guard) => guard.is_held(),
            Hold::Leader(leadership) => leadership.is_held(),
        }
    }

    /// Releases (resigns) it.
    pub async fn release(self) -> Result<(), LockError> {
        match self {
            Hold::Guard(guard) | Hold::Reader(guard) => guard.release().await,
            Hold::Leader(leadership) => leadership.resign().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_tell_the_primitive() {
        assert_eq!(Primitive::of("key-3"), Primitive::Lock);
        assert_eq!(Primitive::of("leader-0"), Primitive::Election);
        assert_eq!(
            Primitive::of("permits-2-0"),
            Primitive::Semaphore { limit: 2 }
        );
        assert_eq!(Primitive::of("permits-x-0"), Primitive::Lock);
        assert_eq!(Primitive::of("rw-0"), Primitive::ReadWrite);
        let all = keys(2, true, true);
        assert_eq!(all, ["key-0", "key-1", "leader-0", "permits-2-0", "rw-0"]);
        assert_eq!(keys(1, false, false), ["key-0", "leader-0"]);
        assert_eq!(keys(1, false, true), ["key-0", "leader-0", "rw-0"]);
    }
}
