//! Finding out, without holding it, whether a lock file is held and by
//! whom: the reads behind `inspect`, watches and `holders()`.
//!
//! A probe takes the file's lock for an instant. When it gets the lock
//! on a lock file that still stands, the name is free, and the probe
//! removes the file as a release would (it leaves the same way as any
//! holder, see [`crate::lockfile`]); that is also how the file of a holder
//! that was killed goes away. Before removing a file that records a token
//! (all files of earlier versions did), the probe raises the name's
//! counter to that token, so later tokens stay above it.

use std::fs::File;
use std::io;
use std::path::Path;

use crate::counter;
use crate::create::Disk;
use crate::exclusive::MAX_REOPENS;
use crate::lockfile::{
    flock, no_token, open_existing, read_all, read_token, remove_reader_slots, stands, LockedFile,
};
use crate::record::{self, Format, Record, Unreadable};

/// How often [`holder`] reads a record again, at once, when it read one
/// while a write was copying it in.
const QUICK_REREADS: usize = 8;

/// Who holds a lock file, as far as `flock` and the record tell.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Holder {
    /// Not locked, or the file does not exist.
    Free,
    /// Locked; the record of the last stamped acquisition (`None` if the
    /// file was never stamped, e.g. locked by a program other than distlock).
    Held(Option<Record>),
    /// Locked, but every read of the record raced a write (or the record is
    /// damaged): ask again in a moment.
    Unsettled,
}

/// What a probe does with a file it finds free.
#[derive(Clone, Copy, Debug)]
pub(crate) enum OnFree {
    /// Leave it (semaphore slots and readers' files: their owners clean up).
    Keep,
    /// Remove it, the name's counter raised first (lock files).
    Remove(Disk),
}

/// Finds out whether the file at `path` is held (by a writer or by
/// readers), and by whom. Takes `LOCK_EX|LOCK_NB` for an instant (an
/// attempt elsewhere at that instant fails). A record read while a write
/// copied it in is read again; see [`crate::record`]. A held file that no
/// longer stands (its holder is removing it) is looked up afresh.
pub(crate) fn holder(path: &Path, on_free: OnFree) -> io::Result<Holder> {
    for _ in 0..MAX_REOPENS {
        let Some(file) = open_existing(path)? else {
            return Ok(Holder::Free);
        };
        if flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
            let locked = LockedFile::new(file, path, 0);
            if let OnFree::Remove(disk) = on_free {
                let removed = locked.remove_if_standing(|path| before_removal(&locked, path, disk));
                not_removed(path, removed.map(drop));
            }
            return Ok(Holder::Free);
        }
        if !stands(&file, path)? {
            continue;
        }
        return read_held(&file);
    }
    Ok(Holder::Free)
}

/// The record of a file someone holds.
fn read_held(file: &File) -> io::Result<Holder> {
    let mut bytes = read_all(file)?;
    for _ in 0..QUICK_REREADS {
        match record::parse(&bytes) {
            Ok(None) => return Ok(Holder::Held(None)),
            Ok(Some((record, Format::Checked))) => return Ok(Holder::Held(Some(record))),
            Ok(Some((record, Format::Plain))) => {
                // Nothing guards the older format: accept it once two
                // reads agree.
                let again = read_all(file)?;
                if again == bytes {
                    return Ok(Holder::Held(Some(record)));
                }
                bytes = again;
            }
            Err(Unreadable::Torn) => {
                std::thread::yield_now();
                bytes = read_all(file)?;
            }
            Err(Unreadable::NoToken) => return Err(no_token()),
        }
    }
    Ok(Holder::Unsettled)
}

/// Whether the lock file `path` is held exclusively now (a
/// `LOCK_SH|LOCK_NB` probe fails). A probe that gets in leaves as readers
/// do, removing the file if it turns out free.
pub(crate) fn held_exclusively(path: &Path, disk: Disk) -> io::Result<bool> {
    let Some(file) = open_existing(path)? else {
        return Ok(false);
    };
    if !flock(&file, libc::LOCK_SH | libc::LOCK_NB)? {
        return Ok(true);
    }
    let locked = LockedFile::new(file, path, 0);
    not_removed(
        path,
        locked.leave_shared(|path| before_removal(&locked, path, disk)),
    );
    Ok(false)
}

/// A probe that could not remove a free file (no write permission on the
/// directory, a damaged record, ...) still answers; the file stays until
/// the name's next holder frees it.
fn not_removed(path: &Path, removed: io::Result<()>) {
    if let Err(error) = removed {
        tracing::debug!(path = %path.display(), %error, "distlock: left a free lock file in place");
    }
}

/// Before a probe removes the free lock file `path` (`locked`): the
/// name's counter raised to the token the file records, and dead readers'
/// files removed. A file that does not start with a token is not removed.
fn before_removal(locked: &LockedFile, path: &Path, disk: Disk) -> io::Result<()> {
    if let (Some(token), _) = read_token(locked.file())? {
        counter::raise(path, token, disk)?;
    }
    remove_reader_slots(path)
}
