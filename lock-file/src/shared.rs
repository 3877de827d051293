//! Read locks on a lock file: `flock(LOCK_SH)` on the file itself, so
//! readers exclude writers (and plain locks) exactly as `flock -s` and
//! `flock` do.
//!
//! `flock` alone lets a steady stream of readers starve a writer: a
//! shared lock is granted whenever no exclusive one is held. So a writer
//! that has to wait marks the gate `K.gate` beside the lock file `K.lock`
//! (`LOCK_SH`, creating the gate, for as long as it waits), and a reader
//! only goes on while no gate is marked: it opens the gate if there is
//! one (never creating it) and takes `LOCK_EX|LOCK_NB` on it. A reader
//! that asks after a writer started waiting therefore waits behind it.
//!
//! Readers share the lock file, so they write their record into it (for
//! `inspect`: the latest reader) one at a time, while holding the lock of
//! the name's [token counter](crate::counter). Each reader also keeps a
//! slot file of its own, `K.reader-0`, `K.reader-1`, …, the lowest one
//! whose `LOCK_EX|LOCK_NB` it gets, holding its record while it lives,
//! so that every reader can be listed: a slot locked is a live reader.
//!
//! Nothing stays once the name is free (see [`crate::lockfile`] for the
//! argument): a reader leaving unlocks its slot; the last one out holds
//! the lock file alone for an instant and removes every slot, then the
//! lock file. Slots are created lowest first and removed only by that
//! last one (or a writer, which also holds the file alone), so they are
//! always numbered from 0 without gaps. The gate goes with the last
//! writer that marked it, or with the first reader that finds it
//! unmarked. Whoever locks the gate or the lock file checks afterwards
//! that the file still stands, and otherwise opens the path afresh: a
//! writer marking a gate about to be removed would not hold back readers
//! that find no gate.

use std::io;
use std::path::{Path, PathBuf};

use crate::counter::Counter;
use crate::create::{open_creating, Disk};
use crate::exclusive::MAX_REOPENS;
use crate::lockfile::{
    between_open_and_flock, flock, open_existing, read_token, remove_reader_slots, LockedFile,
};
use crate::names::{numbered, sibling, GATE_SUFFIX, READER_SUFFIX};
use crate::probe::{self, OnFree};
use crate::record::Record;

/// Most reader slots of one name: as many readers at once.
const MAX_READERS: u32 = 1 << 20;

/// The gate beside the lock file `path`.
pub(crate) fn gate_path(path: &Path) -> PathBuf {
    sibling(path, GATE_SUFFIX)
}

/// A read lock: the lock file, shared-locked, and the reader's slot.
/// Dropping it unlocks the slot, then leaves the lock file (removing the
/// slots and the file if this was the last reader).
#[derive(Debug)]
pub(crate) struct ReadLock {
    own: Option<LockedFile>,
    main: Option<LockedFile>,
}

impl ReadLock {
    /// The shared-locked lock file.
    pub(crate) fn locked(&self) -> Option<&LockedFile> {
        self.main.as_ref()
    }

    /// Replaces the reader's value, in its slot (the lock file's record
    /// is the last stamper's, which another reader may have been).
    pub(crate) fn set_value(&mut self, token: u64, owner: &str, value: &str) -> io::Result<()> {
        match self.own.as_mut() {
            Some(own) => own.write_record(token, owner, value),
            None => Ok(()),
        }
    }

    /// Lets go; whether the lock file still stood (was still ours).
    pub(crate) fn release(mut self) -> io::Result<bool> {
        self.leave().unwrap_or(Ok(false))
    }

    fn leave(&mut self) -> Option<io::Result<bool>> {
        drop(self.own.take());
        let main = self.main.take()?;
        let stood = main.still_stands();
        Some(main.leave_shared(remove_reader_slots).and(stood))
    }
}

impl Drop for ReadLock {
    fn drop(&mut self) {
        self.leave();
    }
}

/// What one read attempt found.
#[derive(Debug)]
pub(crate) enum ReadAttempt {
    /// Held, with this token.
    Locked(ReadLock, u64),
    /// A writer holds the lock, or waits for it.
    Busy,
}

/// One read attempt: no writer waiting at the gate, `LOCK_SH|LOCK_NB` on
/// the lock file, the next token drawn and stamped into its record (under
/// the counter's lock), and a slot of the reader's own taken and written.
pub(crate) fn read_lock_and_stamp(
    path: &Path,
    owner: &str,
    value: &str,
    disk: Disk,
) -> io::Result<ReadAttempt> {
    for _ in 0..MAX_REOPENS {
        if writer_waits(path)? {
            return Ok(ReadAttempt::Busy);
        }
        let file = open_creating(path, disk.sharing)?;
        between_open_and_flock();
        if !flock(&file, libc::LOCK_SH | libc::LOCK_NB)? {
            return Ok(ReadAttempt::Busy);
        }
        let mut main = LockedFile::new(file, path, 0);
        if !main.still_stands()? {
            continue;
        }
        let mut counter = Counter::lock(path, disk)?;
        let (previous, previous_len) = read_token(main.file())?;
        let token = counter.next(previous.unwrap_or(0))?;
        main.set_len(previous_len);
        let mut read = ReadLock {
            own: None,
            main: Some(main),
        };
        if let Some(main) = read.main.as_mut() {
            main.write_record(token, owner, value)?;
        }
        drop(counter);
        read.own = Some(take_slot(path, token, owner, value, disk)?);
        return Ok(ReadAttempt::Locked(read, token));
    }
    Ok(ReadAttempt::Busy)
}

/// Whether a writer waits: the gate exists and its `LOCK_EX|LOCK_NB`
/// fails. A gate nobody marks is removed on the way.
fn writer_waits(path: &Path) -> io::Result<bool> {
    let gate = gate_path(path);
    let Some(file) = open_existing(&gate)? else {
        return Ok(false);
    };
    if !flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
        return Ok(true);
    }
    // Left by writers that went (or died): ours alone now.
    LockedFile::new(file, &gate, 0).remove_if_standing(|_| Ok(()))?;
    Ok(false)
}

/// Takes the lowest reader slot of `path` whose `LOCK_EX|LOCK_NB` we get
/// (creating the next one when all are taken) and writes our record in
/// it.
fn take_slot(
    path: &Path,
    token: u64,
    owner: &str,
    value: &str,
    disk: Disk,
) -> io::Result<LockedFile> {
    for number in 0..MAX_READERS {
        let slot = numbered(path, READER_SUFFIX, number);
        let file = open_creating(&slot, disk.sharing)?;
        if flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
            let (_, len) = read_token(&file).unwrap_or((None, 0));
            let mut own = LockedFile::new(file, &slot, len);
            own.write_record(token, owner, value)?;
            return Ok(own);
        }
    }
    Err(io::Error::other("every reader slot is taken"))
}

/// A waiting writer's mark on the gate: while it lives, readers stay out.
/// Dropping it leaves the gate, removing it if no one else holds it.
#[derive(Debug)]
pub(crate) struct WriterWaiting {
    gate: LockedFile,
}

impl WriterWaiting {
    /// Takes `LOCK_SH|LOCK_NB` on the standing gate of `path`, creating
    /// it; `None` while a reader holds it for the instant it looks (try
    /// again).
    pub(crate) fn try_mark(path: &Path, disk: Disk) -> io::Result<Option<Self>> {
        let gate = gate_path(path);
        for _ in 0..MAX_REOPENS {
            let file = open_creating(&gate, disk.sharing)?;
            if !flock(&file, libc::LOCK_SH | libc::LOCK_NB)? {
                return Ok(None);
            }
            let gate = LockedFile::new(file, &gate, 0);
            if gate.still_stands()? {
                return Ok(Some(Self { gate }));
            }
        }
        Ok(None)
    }
}

impl Drop for WriterWaiting {
    fn drop(&mut self) {
        let _ = self.gate.leave_shared(|_| Ok(()));
    }
}

/// The records of the live readers of the lock file `path`, oldest first:
/// the slots whose lock is taken.
pub(crate) fn readers(path: &Path) -> io::Result<Vec<Record>> {
    let mut records = Vec::new();
    for number in 0..MAX_READERS {
        let slot = numbered(path, READER_SUFFIX, number);
        if !slot.exists() {
            break;
        }
        // Free: a reader gone (its record stays until the last one out
        // removes the slot). Being written or not ours: skipped.
        if let probe::Holder::Held(Some(record)) = probe::holder(&slot, OnFree::Keep)? {
            records.push(record);
        }
    }
    records.sort_by_key(|record| record.token);
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::create::Sharing;
    use crate::exclusive::{lock_and_stamp, Attempted, Exclusive};
    use crate::lockfile::BETWEEN_OPEN_AND_FLOCK;

    const DISK: Disk = Disk {
        sharing: Sharing::Private,
        fsync: false,
    };

    fn hold(path: &Path) -> Exclusive {
        match lock_and_stamp(path, "writer", "", DISK).unwrap() {
            Attempted::Locked(held, _) => held,
            Attempted::Busy => panic!("free file reported busy"),
        }
    }

    /// Between the reader's `open` and its `flock`, the writer holding the
    /// file releases it (removing it) and another writer takes the name
    /// with a new file: the reader's `flock` on the removed file succeeds,
    /// and only the standing check keeps it from reading beside the new
    /// writer.
    #[test]
    fn a_reader_that_locked_a_removed_file_starts_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let first = hold(&path);
        let second = std::rc::Rc::new(std::cell::RefCell::new(None));
        let hook = {
            let (path, second) = (path.clone(), second.clone());
            move || {
                drop(first);
                *second.borrow_mut() = Some(hold(&path));
            }
        };
        BETWEEN_OPEN_AND_FLOCK.with(|h| *h.borrow_mut() = Some(Box::new(hook)));
        let attempt = read_lock_and_stamp(&path, "reader", "", DISK).unwrap();
        assert!(second.borrow().is_some(), "the hook did not run");
        assert!(
            matches!(attempt, ReadAttempt::Busy),
            "a reader beside the writer: {attempt:?}"
        );
    }
}
