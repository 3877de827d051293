//! Exclusive holds: `LOCK_EX` on a name's lock file, stamped with a token
//! from the name's [token counter](crate::counter); freeing the name removes the
//! file while it is still locked (see [`crate::lockfile`] for why that is
//! safe).

use std::io;
use std::path::Path;

use crate::counter;
use crate::create::{open_creating, Disk};
use crate::lockfile::{between_open_and_flock, flock, read_token, remove_reader_slots, LockedFile};

/// How often an attempt opens the lock file afresh when the one it locked
/// was removed (by a release) between its `open` and its `flock`, before
/// it reports the lock busy (it changes hands that fast).
pub(crate) const MAX_REOPENS: usize = 16;

/// A lock file we hold with `LOCK_EX`. Dropping it frees the name: the
/// file (and dead readers' files beside it) is removed while still locked,
/// then unlocked.
#[derive(Debug)]
pub(crate) struct Exclusive {
    /// `None` once released.
    locked: Option<LockedFile>,
}

impl Exclusive {
    /// The locked file.
    pub(crate) fn locked(&self) -> Option<&LockedFile> {
        self.locked.as_ref()
    }

    /// The locked file, to write a new record.
    pub(crate) fn locked_mut(&mut self) -> Option<&mut LockedFile> {
        self.locked.as_mut()
    }

    /// Frees the name; whether the file still stood (was still ours).
    pub(crate) fn release(mut self) -> io::Result<bool> {
        self.leave().unwrap_or(Ok(false))
    }

    fn leave(&mut self) -> Option<io::Result<bool>> {
        let locked = self.locked.take()?;
        Some(locked.remove_if_standing(remove_reader_slots))
    }
}

impl Drop for Exclusive {
    fn drop(&mut self) {
        self.leave();
    }
}

/// What one exclusive attempt found.
#[derive(Debug)]
pub(crate) enum Attempted {
    /// We hold the lock and stamped it with this token.
    Locked(Exclusive, u64),
    /// Someone holds it.
    Busy,
}

/// One exclusive attempt: open (creating file and namespace directory if
/// needed), `flock(LOCK_EX|LOCK_NB)`, check the file still stands, draw
/// the next token (above any token the file records, as files of earlier
/// versions do) and write it with `owner` and `value`. Returns with the
/// lock held or not held, never half-way.
///
/// A file whose first line is not a token is an error and is left as it
/// is (it is not one of ours, or it is damaged: removing it could lose a
/// token of an earlier version).
pub(crate) fn lock_and_stamp(
    path: &Path,
    owner: &str,
    value: &str,
    disk: Disk,
) -> io::Result<Attempted> {
    for _ in 0..MAX_REOPENS {
        let file = open_creating(path, disk.sharing)?;
        between_open_and_flock();
        if !flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
            return Ok(Attempted::Busy);
        }
        let mut locked = LockedFile::new(file, path, 0);
        // Freed (and removed) between our open and our flock: a lock on an
        // unlinked inode excludes nobody.
        if !locked.still_stands()? {
            continue;
        }
        let (previous, previous_len) = read_token(locked.file())?;
        let token = counter::draw(path, previous.unwrap_or(0), disk)?;
        locked.set_len(previous_len);
        // From here on the counter has the file's token: dropping the hold
        // may remove the file.
        let mut held = Exclusive {
            locked: Some(locked),
        };
        if let Some(locked) = held.locked_mut() {
            locked.write_record(token, owner, value)?;
        }
        return Ok(Attempted::Locked(held, token));
    }
    Ok(Attempted::Busy)
}

#[cfg(test)]
mod tests;
