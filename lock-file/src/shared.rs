//! Read locks on a lock file: `flock(LOCK_SH)` on the file itself, so
//! readers exclude writers (and plain locks) exactly as `flock -s` and
//! `flock` do.
//!
//! `flock` alone lets a steady stream of readers starve a writer: a
//! shared lock is granted whenever no exclusive one is held. Beside each
//! lock file `K.lock` lies, while anyone uses it, its gate `K.gate`: a
//! writer that has to wait holds `LOCK_SH` on the gate for as long as it
//! waits, and a reader takes the lock only while it can take
//! `LOCK_EX|LOCK_NB` on the gate. So a reader that asks after a writer
//! started waiting waits behind it; the gate also lets one reader at a
//! time write its record into the lock file.
//!
//! Each reader also keeps a file of its own, `K.readers/<token>`, locked
//! with `LOCK_EX` and holding its record, so that every reader can be
//! listed; a file whose lock is free belongs to a reader that died, and is
//! removed by whoever lists the readers.
//!
//! Nothing stays once the name is free (see [`crate::lockfile`] for the
//! argument): a reader removes its own file while it still holds it; the
//! last reader out removes the lock file and the readers' directory, and
//! the gate goes with the last one who held it (a reader, which holds it
//! alone, removes it before letting go; the last waiting writer out
//! removes it as the last reader removes the lock file). Whoever locks the
//! gate or the lock file checks afterwards that the file still stands, and
//! otherwise opens the path afresh: a writer marking a gate about to be
//! removed would otherwise not hold back readers that open the new one.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::counter;
use crate::create::{open_creating, Disk};
use crate::exclusive::MAX_REOPENS;
use crate::lockfile::{self, flock, read_token, remove_readers_dir, LockedFile};
use crate::names::{sibling, GATE_SUFFIX, READERS_SUFFIX};
use crate::probe::{self, OnFree};
use crate::record::Record;

/// The gate beside the lock file `path`.
pub(crate) fn gate_path(path: &Path) -> PathBuf {
    sibling(path, GATE_SUFFIX)
}

/// The directory of the readers of the lock file `path`.
fn readers_dir(path: &Path) -> PathBuf {
    sibling(path, READERS_SUFFIX)
}

/// A read lock: the lock file, shared-locked, and the reader's own file.
/// Dropping it removes the reader's file, then leaves the lock file
/// (removing it if this was the last reader).
#[derive(Debug)]
pub(crate) struct ReadLock {
    own: Option<ReaderFile>,
    main: Option<LockedFile>,
}

impl ReadLock {
    /// The shared-locked lock file.
    pub(crate) fn locked(&self) -> Option<&LockedFile> {
        self.main.as_ref()
    }

    /// Replaces the reader's value, in its own file (the lock file's
    /// record is the last stamper's, which another reader may have been).
    pub(crate) fn set_value(&mut self, token: u64, owner: &str, value: &str) -> io::Result<()> {
        match self.own.as_mut() {
            Some(own) => own.file.write_record(token, owner, value),
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
        Some(main.leave_shared(remove_readers_dir).and(stood))
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

/// One read attempt: through the gate (`LOCK_EX|LOCK_NB`: no writer
/// waits), `LOCK_SH|LOCK_NB` on the lock file, the next token drawn and
/// stamped into its record, and the reader's own file written and locked.
pub(crate) fn read_lock_and_stamp(
    path: &Path,
    owner: &str,
    value: &str,
    disk: Disk,
) -> io::Result<ReadAttempt> {
    for _ in 0..MAX_REOPENS {
        let Some(_gate) = Gate::enter(path, disk)? else {
            return Ok(ReadAttempt::Busy);
        };
        let file = open_creating(path, disk.sharing)?;
        if !flock(&file, libc::LOCK_SH | libc::LOCK_NB)? {
            return Ok(ReadAttempt::Busy);
        }
        let mut main = LockedFile::new(file, path, 0);
        if !main.still_stands()? {
            continue;
        }
        // Readers stamp one at a time (we hold the gate) and no writer
        // holds the file (we share it).
        let (previous, previous_len) = read_token(main.file())?;
        let token = counter::draw(path, previous.unwrap_or(0), disk)?;
        main.set_len(previous_len);
        let mut read = ReadLock {
            own: None,
            main: Some(main),
        };
        if let Some(main) = read.main.as_mut() {
            main.write_record(token, owner, value)?;
        }
        let own_path = readers_dir(path).join(token.to_string());
        read.own = Some(ReaderFile::create(&own_path, token, owner, value, disk)?);
        return Ok(ReadAttempt::Locked(read, token));
    }
    Ok(ReadAttempt::Busy)
}

/// A reader's hold of the gate (`LOCK_EX`), for the instant of its stamp;
/// dropping it removes the gate (nobody else holds it), then unlocks.
struct Gate(LockedFile);

impl Gate {
    /// Takes `LOCK_EX|LOCK_NB` on the standing gate of `path`; `None`
    /// while a writer waits (or someone else holds it).
    fn enter(path: &Path, disk: Disk) -> io::Result<Option<Self>> {
        let gate = gate_path(path);
        for _ in 0..MAX_REOPENS {
            let file = open_creating(&gate, disk.sharing)?;
            if !flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
                return Ok(None);
            }
            let held = LockedFile::new(file, &gate, 0);
            if held.still_stands()? {
                return Ok(Some(Self(held)));
            }
        }
        Ok(None)
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = self.0.remove_if_standing(|_| Ok(()));
    }
}

/// A waiting writer's mark on the gate: while it lives, readers stay out.
/// Dropping it leaves the gate, removing it if no one else holds it.
#[derive(Debug)]
pub(crate) struct WriterWaiting {
    gate: LockedFile,
}

impl WriterWaiting {
    /// Takes `LOCK_SH|LOCK_NB` on the standing gate of `path`; `None`
    /// while a reader holds the gate for the instant of its stamp (try
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

/// A reader's own file, locked while the reader lives; removed when it
/// is dropped.
#[derive(Debug)]
struct ReaderFile {
    file: LockedFile,
}

impl ReaderFile {
    fn create(path: &Path, token: u64, owner: &str, value: &str, disk: Disk) -> io::Result<Self> {
        let file = open_creating(path, disk.sharing)?;
        if !flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
            return Err(io::Error::other(format!(
                "the reader file `{}` is locked by someone else",
                path.display()
            )));
        }
        let mut file = LockedFile::new(file, path, 0);
        file.write_record(token, owner, value)?;
        Ok(Self { file })
    }
}

impl Drop for ReaderFile {
    fn drop(&mut self) {
        // Removed while still locked, so no lister takes it for a dead
        // reader's and nobody else can hold a file at this path.
        let _ = fs::remove_file(self.file.path());
    }
}

/// The records of the live readers of the lock file `path`, oldest first;
/// files of dead readers are removed on the way.
pub(crate) fn readers(path: &Path) -> io::Result<Vec<Record>> {
    let entries = match fs::read_dir(readers_dir(path)) {
        Ok(entries) => entries,
        Err(error) if lockfile::is_missing(&error) => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut records = Vec::new();
    for entry in entries {
        let entry_path = entry?.path();
        match probe::holder(&entry_path, OnFree::Keep)? {
            probe::Holder::Held(Some(record)) => records.push(record),
            probe::Holder::Free => {
                let _ = fs::remove_file(&entry_path);
            }
            // Being written, or not ours: skip it this time.
            probe::Holder::Held(None) | probe::Holder::Unsettled => {}
        }
    }
    records.sort_by_key(|record| record.token);
    Ok(records)
}
