//! Read locks on a lock file: `flock(LOCK_SH)` on the file itself, so
//! readers exclude writers (and plain locks) exactly as `flock -s` and
//! `flock` do.
//!
//! `flock` alone lets a steady stream of readers starve a writer: a
//! shared lock is granted whenever no exclusive one is held. Beside each
//! lock file `K.lock` lies its gate, `K.gate`: a writer that has to wait
//! holds `LOCK_SH` on the gate for as long as it waits, and a reader takes
//! the lock only while it can take `LOCK_EX|LOCK_NB` on the gate. So a
//! reader that asks after a writer started waiting waits behind it; the
//! gate also lets one reader at a time stamp the next token into the lock
//! file's record (one counter for readers and writers).
//!
//! Each reader also keeps a file of its own, `K.readers/<token>`, locked
//! with `LOCK_EX` and holding its record, so that every reader can be
//! listed; a file whose lock is free belongs to a reader that died, and is
//! removed by whoever lists the readers.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use crate::lockfile::{self, flock, open_creating, LockedFile};
use crate::record::Record;

/// Suffix of a lock file's gate.
const GATE_SUFFIX: &str = ".gate";
/// Suffix of the directory of a lock file's readers.
const READERS_SUFFIX: &str = ".readers";

/// The gate beside the lock file `path`.
pub(crate) fn gate_path(path: &Path) -> PathBuf {
    sibling(path, GATE_SUFFIX)
}

/// The directory of the readers of the lock file `path`.
fn readers_dir(path: &Path) -> PathBuf {
    sibling(path, READERS_SUFFIX)
}

/// `K.lock` → `K<suffix>`. Encoded keys contain no `.`, so these names
/// never collide with another key's files.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let stem = name
        .strip_suffix(crate::names::LOCK_SUFFIX)
        .unwrap_or(&name);
    path.with_file_name(format!("{stem}{suffix}"))
}

/// A read lock: the lock file, shared-locked, and the reader's own file.
#[derive(Debug)]
pub(crate) struct ReadLocked {
    pub(crate) main: LockedFile,
    pub(crate) own: ReaderFile,
    pub(crate) token: u64,
}

/// What one read attempt found.
#[derive(Debug)]
pub(crate) enum ReadAttempt {
    Locked(ReadLocked),
    /// A writer holds the lock, or waits for it.
    Busy,
}

/// One read attempt: through the gate (`LOCK_EX|LOCK_NB`: no writer
/// waits), `LOCK_SH|LOCK_NB` on the lock file, the next token stamped
/// into its record, and the reader's own file written and locked.
pub(crate) fn read_lock_and_stamp(
    path: &Path,
    owner: &str,
    value: &str,
    fsync: bool,
) -> io::Result<ReadAttempt> {
    let gate = open_creating(&gate_path(path))?;
    if !flock(&gate, libc::LOCK_EX | libc::LOCK_NB)? {
        return Ok(ReadAttempt::Busy);
    }
    let file = open_creating(path)?;
    if !flock(&file, libc::LOCK_SH | libc::LOCK_NB)? {
        return Ok(ReadAttempt::Busy);
    }
    let mut main = LockedFile::new(file, 0);
    if !main.still_stands(path)? {
        return Err(io::Error::other(
            "the lock file was replaced while taking a read lock on it",
        ));
    }
    // Readers stamp one at a time (we hold the gate) and no writer holds
    // the file (we share it): the counter is ours to move.
    let (previous, previous_len) = lockfile::read_token(main.file())?;
    let token = previous.unwrap_or(0).checked_add(1).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "token counter is at its maximum",
        )
    })?;
    main.set_len(previous_len);
    main.write_record(token, owner, value)?;
    let own = ReaderFile::create(
        &readers_dir(path).join(token.to_string()),
        token,
        owner,
        value,
    )?;
    if fsync {
        main.file().sync_data()?;
    }
    drop(gate);
    Ok(ReadAttempt::Locked(ReadLocked { main, own, token }))
}

/// A waiting writer's mark on the gate: while it lives, readers stay out.
#[derive(Debug)]
pub(crate) struct WriterWaiting {
    _gate: File,
}

impl WriterWaiting {
    /// Takes `LOCK_SH|LOCK_NB` on the gate of `path`; `None` while a reader
    /// holds the gate for the instant of its stamp (try again).
    pub(crate) fn try_mark(path: &Path) -> io::Result<Option<Self>> {
        let gate = open_creating(&gate_path(path))?;
        Ok(flock(&gate, libc::LOCK_SH | libc::LOCK_NB)?.then_some(Self { _gate: gate }))
    }
}

/// A reader's own file, locked while the reader lives; removed when it
/// is dropped.
#[derive(Debug)]
pub(crate) struct ReaderFile {
    file: LockedFile,
    path: PathBuf,
}

impl ReaderFile {
    fn create(path: &Path, token: u64, owner: &str, value: &str) -> io::Result<Self> {
        let file = open_creating(path)?;
        if !flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
            return Err(io::Error::other(format!(
                "the reader file `{}` is locked by someone else",
                path.display()
            )));
        }
        let mut file = LockedFile::new(file, 0);
        file.write_record(token, owner, value)?;
        Ok(Self {
            file,
            path: path.to_owned(),
        })
    }

    /// Replaces the reader's value.
    pub(crate) fn set_value(&mut self, token: u64, owner: &str, value: &str) -> io::Result<()> {
        self.file.write_record(token, owner, value)
    }
}

impl Drop for ReaderFile {
    fn drop(&mut self) {
        // Removed while still locked, so no lister takes it for a dead
        // reader's and nobody else can hold a file at this path.
        let _ = fs::remove_file(&self.path);
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
        match lockfile::holder(&entry_path)? {
            lockfile::Holder::Held(Some(record)) => records.push(record),
            lockfile::Holder::Free => {
                let _ = fs::remove_file(&entry_path);
            }
            // Being written, or not ours: skip it this time.
            lockfile::Holder::Held(None) | lockfile::Holder::Unsettled => {}
        }
    }
    records.sort_by_key(|record| record.token);
    Ok(records)
}

/// Whether the lock file `path` is held exclusively now (a
/// `LOCK_SH|LOCK_NB` probe fails).
pub(crate) fn held_exclusively(path: &Path) -> io::Result<bool> {
    let file = match fs::File::open(path) {
        Ok(file) => file,
        Err(error) if lockfile::is_missing(&error) => return Ok(false),
        Err(error) => return Err(error),
    };
    Ok(!flock(&file, libc::LOCK_SH | libc::LOCK_NB)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_replace_the_lock_suffix() {
        let lock = Path::new("/d/ns/a%2Fb.lock");
        assert_eq!(gate_path(lock), Path::new("/d/ns/a%2Fb.gate"));
        assert_eq!(readers_dir(lock), Path::new("/d/ns/a%2Fb.readers"));
    }
}
