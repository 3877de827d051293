//! One attempt at any kind of hold: the name's lock alone (`LOCK_EX` on
//! the lock file, [`crate::exclusive`]), a read lock ([`crate::shared`])
//! or a permit ([`crate::permits`]); and the hold it gives.

use std::io;
use std::path::Path;

use lock_core::HoldKind;

use crate::create::Disk;
use crate::exclusive::{self, Attempted, Exclusive};
use crate::lockfile::LockedFile;
use crate::permits::{self, Permit, PermitAttempt};
use crate::shared::{self, ReadAttempt, ReadLock};

/// What one attempt found.
#[derive(Debug)]
pub(crate) enum Taken {
    /// Held now, with this token.
    Held(Hold, u64),
    /// Not free now.
    Busy,
    /// The semaphore's permits are held under another limit.
    Mismatch {
        /// That limit.
        stored: u32,
    },
}

/// A hold just taken. Dropping it lets go (synchronously), removing the
/// name's files if that frees the name.
#[derive(Debug)]
pub(crate) enum Hold {
    Exclusive(Exclusive),
    Read(ReadLock),
    Permit(Permit),
}

impl Hold {
    /// The locked file whose standing at its path says the hold is still
    /// ours: the lock file, or a permit's slot. `None` once released.
    pub(crate) fn locked(&self) -> Option<&LockedFile> {
        match self {
            Self::Exclusive(hold) => hold.locked(),
            Self::Read(hold) => hold.locked(),
            Self::Permit(hold) => hold.locked(),
        }
    }

    /// Rewrites the holder's record with a new value (a reader's lives in
    /// its own file).
    pub(crate) fn set_value(&mut self, token: u64, owner: &str, value: &str) -> io::Result<()> {
        let locked = match self {
            Self::Read(hold) => return hold.set_value(token, owner, value),
            Self::Exclusive(hold) => hold.locked_mut(),
            Self::Permit(hold) => hold.locked_mut(),
        };
        match locked {
            Some(locked) => locked.write_record(token, owner, value),
            None => Ok(()),
        }
    }

    /// Lets go; whether the hold still stood (its file was still ours).
    pub(crate) fn release(self) -> io::Result<bool> {
        match self {
            Self::Exclusive(hold) => hold.release(),
            Self::Read(hold) => hold.release(),
            Self::Permit(hold) => hold.release(),
        }
    }
}

/// Takes a hold of `kind` on the name whose lock file is `path`.
pub(crate) fn attempt(
    path: &Path,
    kind: HoldKind,
    owner: &str,
    value: &str,
    disk: Disk,
) -> io::Result<Taken> {
    let taken = match kind {
        HoldKind::Shared => match shared::read_lock_and_stamp(path, owner, value, disk)? {
            ReadAttempt::Busy => Taken::Busy,
            ReadAttempt::Locked(read, token) => Taken::Held(Hold::Read(read), token),
        },
        HoldKind::Permit { limit } => {
            match permits::take_permit(path, limit, owner, value, disk)? {
                PermitAttempt::Busy => Taken::Busy,
                PermitAttempt::Mismatch { stored } => Taken::Mismatch { stored },
                PermitAttempt::Taken(permit, token) => Taken::Held(Hold::Permit(permit), token),
            }
        }
        _ => match exclusive::lock_and_stamp(path, owner, value, disk)? {
            Attempted::Busy => Taken::Busy,
            Attempted::Locked(hold, token) => Taken::Held(Hold::Exclusive(hold), token),
        },
    };
    Ok(taken)
}
