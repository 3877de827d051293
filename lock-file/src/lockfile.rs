//! The system calls on one lock file: open, `flock(2)`, the token record,
//! and the check that the file still stands at its path.
//!
//! Everything here is synchronous and short: local `open`, non-blocking
//! `flock`, and reads/writes of a few dozen bytes (plus `fdatasync` when
//! asked for).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Mode of the lock files the backend creates, before the umask.
pub const FILE_MODE: u32 = 0o644;
/// The most of a lock file we read: a token line and an owner line.
const MAX_RECORD_LEN: usize = 4096;
/// How often an acquire reopens a file that was replaced under it.
const MAX_REOPENS: usize = 5;

/// An open lock file whose exclusive `flock` we hold. Dropping it unlocks
/// and closes, synchronously.
#[derive(Debug)]
pub(crate) struct LockedFile {
    file: File,
}

impl LockedFile {
    /// Whether the lock file at `path` is still the one we locked: the
    /// path names our inode and the inode was not unlinked. A missing path
    /// (or a missing directory on the way) means it does not.
    pub(crate) fn still_stands(&self, path: &Path) -> io::Result<bool> {
        let ours = self.file.metadata()?;
        if ours.nlink() == 0 {
            return Ok(false);
        }
        match fs::symlink_metadata(path) {
            Ok(now) => Ok(now.dev() == ours.dev() && now.ino() == ours.ino()),
            Err(error) if is_missing(&error) => Ok(false),
            Err(error) => Err(error),
        }
    }
}

impl Drop for LockedFile {
    fn drop(&mut self) {
        // Unlock explicitly: a child forked by another thread may still share
        // this open file description until it execs, and close alone would
        // leave the lock held until then.
        let _ = flock(&self.file, libc::LOCK_UN);
    }
}

/// What one lock attempt found.
#[derive(Debug)]
pub(crate) enum Attempted {
    /// We hold the lock and stamped it with this token.
    Locked(LockedFile, u64),
    /// Someone holds it.
    Busy,
}

/// One acquisition attempt: open (creating file and namespace directory
/// if needed), `flock(LOCK_EX|LOCK_NB)`, then read the token, add one and
/// write it back with `owner`. Returns with the lock held or not held,
/// never half-way: on any error the file is unlocked and closed.
pub(crate) fn lock_and_stamp(path: &Path, owner: &str, fsync: bool) -> io::Result<Attempted> {
    for _ in 0..MAX_REOPENS {
        let file = open_creating(path)?;
        if !flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
            return Ok(Attempted::Busy);
        }
        let locked = LockedFile { file };
        // The file may have been removed (by an operator) between our open
        // and our flock; a lock on an unlinked inode excludes nobody.
        if !locked.still_stands(path)? {
            continue;
        }
        let (previous, previous_len) = read_record(&locked.file)?;
        let token = previous
            .as_ref()
            .map_or(0, |record| record.token)
            .checked_add(1)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    "token counter is at its maximum",
                )
            })?;
        write_record(&locked.file, token, owner, previous_len)?;
        if fsync {
            locked.file.sync_data()?;
            if previous.is_none() {
                // A new file: make its directory entry durable too.
                if let Some(dir) = path.parent() {
                    File::open(dir)?.sync_all()?;
                }
            }
        }
        return Ok(Attempted::Locked(locked, token));
    }
    Err(io::Error::other(
        "the lock file was replaced on every attempt to lock it",
    ))
}

/// Who holds a lock file, as far as `flock` and the record tell.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Holder {
    /// Not locked, or the file does not exist.
    Free,
    /// Locked; the record of the last stamped acquisition (`None` if the
    /// file was never stamped, e.g. locked by a program other than distlock).
    Held(Option<Record>),
}

/// Finds out whether the lock at `path` is held. Takes `LOCK_SH|LOCK_NB`
/// for an instant (an exclusive attempt elsewhere at that instant fails).
pub(crate) fn holder(path: &Path) -> io::Result<Holder> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(file) => file,
        Err(error) if is_missing(&error) => return Ok(Holder::Free),
        Err(error) => return Err(error),
    };
    if flock(&file, libc::LOCK_SH | libc::LOCK_NB)? {
        flock(&file, libc::LOCK_UN)?;
        return Ok(Holder::Free);
    }
    read_record(&file).map(|(record, _)| Holder::Held(record))
}

/// What a lock file records: the last token issued and its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) token: u64,
    /// `None` if the owner line is missing.
    pub(crate) owner: Option<String>,
}

/// Opens `path` read-write, creating it (mode [`FILE_MODE`]) and its
/// directory if missing. Never follows a symlink at the last component.
fn open_creating(path: &Path) -> io::Result<File> {
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
    };
    match open() {
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir)?;
            }
            open()
        }
        other => other,
    }
}

/// `flock(2)`; `Ok(false)` when a non-blocking request would block.
fn flock(file: &File, operation: libc::c_int) -> io::Result<bool> {
    loop {
        // SAFETY: the descriptor is open for as long as `file` lives.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Ok(true);
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(code) if code == libc::EWOULDBLOCK => return Ok(false),
            _ => return Err(error),
        }
    }
}

/// Reads the record; `None` for an empty (never stamped) file.
fn read_record(file: &File) -> io::Result<(Option<Record>, usize)> {
    let mut buf = vec![0u8; MAX_RECORD_LEN];
    let mut len = 0;
    while len < buf.len() {
        match file.read_at(&mut buf[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                // A short read of a regular file means end of file: saves
                // the extra read that would only return 0.
                if len < buf.len() {
                    break;
                }
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok((parse_record(&buf[..len])?, len))
}

/// `token\nowner\n`. Anything after the owner line is ignored (a crash
/// between the write and the truncation can leave an older tail there).
fn parse_record(bytes: &[u8]) -> io::Result<Option<Record>> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let invalid = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "the file does not start with a fencing token line",
        )
    };
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.split('\n');
    let token = lines
        .next()
        .and_then(|line| line.trim().parse::<u64>().ok())
        .ok_or_else(invalid)?;
    let owner = match (lines.next(), lines.next()) {
        // Only a complete (newline-terminated) owner line counts.
        (Some(owner), Some(_)) if !owner.is_empty() => Some(owner.to_owned()),
        _ => None,
    };
    Ok(Some(Record { token, owner }))
}

/// Writes `token\nowner\n` with one positioned write, padded with
/// newlines to cover the `previous_len` bytes of the last record (the
/// parser ignores what follows the owner line). Padding instead of
/// truncating saves a journaled `ftruncate` on every acquisition.
fn write_record(file: &File, token: u64, owner: &str, previous_len: usize) -> io::Result<()> {
    let owner = owner.replace(['\n', '\r'], " ");
    let mut record = format!("{token}\n{owner}\n").into_bytes();
    if record.len() < previous_len {
        record.resize(previous_len, b'\n');
    }
    file.write_all_at(&record, 0)
}

/// Whether `error` means the path (or a directory on it) does not exist.
fn is_missing(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::NotFound || error.raw_os_error() == Some(libc::ENOTDIR)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(token: u64, owner: Option<&str>) -> Option<Record> {
        Some(Record {
            token,
            owner: owner.map(str::to_owned),
        })
    }

    #[test]
    fn records_parse_leniently_after_the_token() {
        assert_eq!(parse_record(b"").unwrap(), None);
        assert_eq!(
            parse_record(b"7\nh/1/u\n").unwrap(),
            record(7, Some("h/1/u"))
        );
        assert_eq!(
            parse_record(b"7\nh/1/u\nold tail").unwrap(),
            record(7, Some("h/1/u"))
        );
        assert_eq!(parse_record(b"7\nh/1/").unwrap(), record(7, None));
        assert_eq!(parse_record(b"7\n").unwrap(), record(7, None));
        assert_eq!(parse_record(b"7").unwrap(), record(7, None));
    }

    #[test]
    fn a_file_without_a_token_is_an_error() {
        for bad in [&b"x\n"[..], b"\n", b"-1\n", b"99999999999999999999999\n"] {
            assert!(parse_record(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn stamping_counts_up_and_records_the_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ns").join("k.lock");
        for expected in 1..=3 {
            match lock_and_stamp(&path, "me/1/x", false).unwrap() {
                Attempted::Locked(locked, token) => {
                    assert_eq!(token, expected);
                    assert_eq!(
                        holder(&path).unwrap(),
                        Holder::Held(record(token, Some("me/1/x")))
                    );
                    drop(locked);
                }
                Attempted::Busy => panic!("free file reported busy"),
            }
            assert_eq!(holder(&path).unwrap(), Holder::Free);
        }
        assert_eq!(fs::read_to_string(&path).unwrap(), "3\nme/1/x\n");
    }

    #[test]
    fn a_shorter_record_is_padded_and_still_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let file = open_creating(&path).unwrap();
        write_record(&file, 9, "a-much-longer-owner/1/x", 0).unwrap();
        let (_, len) = read_record(&file).unwrap();
        write_record(&file, 10, "me/1/y", len).unwrap();
        let (record, _) = read_record(&file).unwrap();
        assert_eq!(
            record,
            Some(Record {
                token: 10,
                owner: Some("me/1/y".into())
            })
        );
    }

    /// Open, lock, unlock, close: whether the lock could be taken.
    fn lock_unlock_once(path: &Path) -> io::Result<bool> {
        let file = open_creating(path)?;
        if !flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
            return Ok(false);
        }
        flock(&file, libc::LOCK_UN)?;
        Ok(true)
    }

    /// Locks and stamps `path`, which must be free.
    fn lock_free(path: &Path, fsync: bool) -> LockedFile {
        match lock_and_stamp(path, "a", fsync).unwrap() {
            Attempted::Locked(locked, _) => locked,
            Attempted::Busy => panic!("free file reported busy"),
        }
    }

    #[test]
    fn a_second_open_in_the_same_process_is_excluded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let first = lock_free(&path, false);
        assert!(matches!(
            lock_and_stamp(&path, "b", false).unwrap(),
            Attempted::Busy
        ));
        assert!(!lock_unlock_once(&path).unwrap());
        drop(first);
        assert!(lock_unlock_once(&path).unwrap());
    }

    #[test]
    fn a_removed_or_replaced_file_no_longer_stands() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let locked = lock_free(&path, true);
        assert!(locked.still_stands(&path).unwrap());
        fs::remove_file(&path).unwrap();
        assert!(!locked.still_stands(&path).unwrap());
        fs::write(&path, "").unwrap();
        assert!(!locked.still_stands(&path).unwrap());
    }

    #[test]
    fn symlinks_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("precious");
        fs::write(&target, "keep me").unwrap();
        let path = dir.path().join("k.lock");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(lock_and_stamp(&path, "a", false).is_err());
        assert_eq!(fs::read_to_string(&target).unwrap(), "keep me");
    }
}
