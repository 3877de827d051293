//! The system calls on one lock file: open, `flock(2)`, reading and
//! writing its [record](crate::record), and the check that the file still
//! stands at its path.
//!
//! Everything here is synchronous and short: local `open`, non-blocking
//! `flock`, and reads/writes of a record (a few dozen bytes, up to ~4 KiB
//! with the longest value; plus `fdatasync` when asked for).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::record::{self, Format, Record, Unreadable};

/// Mode of the lock files the backend creates, before the umask.
pub const FILE_MODE: u32 = 0o644;
/// The most of a lock file a reader reads: a record with the longest owner
/// and value fits well within it.
const MAX_READ_LEN: usize = 16 * 1024;
/// What an acquisition reads at first: enough for any record without a
/// long value, on the stack.
const FIRST_READ_LEN: usize = 1024;
/// How often an acquire reopens a file that was replaced under it.
const MAX_REOPENS: usize = 5;
/// How often [`holder`] reads a record again, at once, when it read one
/// while a write was copying it in.
const QUICK_REREADS: usize = 8;

/// An open lock file whose exclusive `flock` we hold. Dropping it unlocks
/// and closes, synchronously.
#[derive(Debug)]
pub(crate) struct LockedFile {
    file: File,
    /// How much of the file our next record must cover: the longest
    /// record written since we locked it, or what the file held then.
    len: usize,
}

impl LockedFile {
    /// `file`, whose `flock` the caller holds, with a record covering
    /// `len` bytes.
    pub(crate) fn new(file: File, len: usize) -> Self {
        Self { file, len }
    }

    /// The open file.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// Makes the next record cover at least `len` bytes (what the file
    /// holds now).
    pub(crate) fn set_len(&mut self, len: usize) {
        self.len = len;
    }

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

    /// Writes the record of `token`, `owner` and `value`: one positioned
    /// write at offset 0, padded with newlines over the previous record
    /// (padding instead of truncating saves a journaled `ftruncate`).
    pub(crate) fn write_record(&mut self, token: u64, owner: &str, value: &str) -> io::Result<()> {
        let bytes = record::encode(token, owner, value, self.len);
        self.file.write_all_at(&bytes, 0)?;
        self.len = bytes.len();
        Ok(())
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
/// write it back with `owner` and `value`. Returns with the lock held or
/// not held, never half-way: on any error the file is unlocked and closed.
pub(crate) fn lock_and_stamp(
    path: &Path,
    owner: &str,
    value: &str,
    fsync: bool,
) -> io::Result<Attempted> {
    for _ in 0..MAX_REOPENS {
        let file = open_creating(path)?;
        if !flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
            return Ok(Attempted::Busy);
        }
        let mut locked = LockedFile { file, len: 0 };
        // The file may have been removed (by an operator) between our open
        // and our flock; a lock on an unlinked inode excludes nobody.
        if !locked.still_stands(path)? {
            continue;
        }
        let (previous, previous_len) = read_token(&locked.file)?;
        let token = previous.unwrap_or(0).checked_add(1).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "token counter is at its maximum",
            )
        })?;
        locked.len = previous_len;
        locked.write_record(token, owner, value)?;
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
    /// Locked, but every read of the record raced a write (or the record is
    /// damaged): ask again in a moment.
    Unsettled,
}

/// Finds out whether the lock at `path` is held (by a writer or by
/// readers), and by whom. Takes `LOCK_EX|LOCK_NB` for an instant (an
/// attempt elsewhere at that instant fails). A record read while a write copied it in is read again;
/// see [`crate::record`].
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
    if flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
        flock(&file, libc::LOCK_UN)?;
        return Ok(Holder::Free);
    }
    let mut bytes = read_all(&file)?;
    for _ in 0..QUICK_REREADS {
        match record::parse(&bytes) {
            Ok(None) => return Ok(Holder::Held(None)),
            Ok(Some((record, Format::Checked))) => return Ok(Holder::Held(Some(record))),
            Ok(Some((record, Format::Plain))) => {
                // Nothing guards the older format: accept it once two
                // reads agree.
                let again = read_all(&file)?;
                if again == bytes {
                    return Ok(Holder::Held(Some(record)));
                }
                bytes = again;
            }
            Err(Unreadable::Torn) => {
                std::thread::yield_now();
                bytes = read_all(&file)?;
            }
            Err(Unreadable::NoToken) => return Err(no_token()),
        }
    }
    Ok(Holder::Unsettled)
}

/// Opens `path` read-write, creating it (mode [`FILE_MODE`]) and its
/// directory if missing. Never follows a symlink at the last component.
pub(crate) fn open_creating(path: &Path) -> io::Result<File> {
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
pub(crate) fn flock(file: &File, operation: libc::c_int) -> io::Result<bool> {
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

/// Fills `buf` from offset 0 as far as the file goes; the bytes read.
fn read_into(file: &File, buf: &mut [u8]) -> io::Result<usize> {
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
    Ok(len)
}

/// The first [`MAX_READ_LEN`] bytes of the file.
fn read_all(file: &File) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; MAX_READ_LEN];
    let len = read_into(file, &mut buf)?;
    buf.truncate(len);
    Ok(buf)
}

/// The token on the first line (`None`: empty file) and how many bytes of
/// the file the next record should cover. One read into a buffer on the
/// stack, plus an `fstat` only for a file too long for it.
pub(crate) fn read_token(file: &File) -> io::Result<(Option<u64>, usize)> {
    let mut buf = [0u8; FIRST_READ_LEN];
    let mut len = read_into(file, &mut buf)?;
    let token = record::parse_token(&buf[..len]).map_err(|_| no_token())?;
    if len == buf.len() {
        let size = file.metadata()?.len();
        len = usize::try_from(size)
            .unwrap_or(usize::MAX)
            .min(MAX_READ_LEN);
    }
    Ok((token, len))
}

fn no_token() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "the file does not start with a fencing token line",
    )
}

/// Whether `error` means the path (or a directory on it) does not exist.
pub(crate) fn is_missing(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::NotFound || error.raw_os_error() == Some(libc::ENOTDIR)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(token: u64, owner: &str, value: &str) -> Option<Record> {
        Some(Record {
            token,
            owner: Some(owner.to_owned()),
            value: value.to_owned(),
        })
    }

    #[test]
    fn stamping_counts_up_and_records_owner_and_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ns").join("k.lock");
        for expected in 1..=3 {
            match lock_and_stamp(&path, "me/1/x", "v\n1", false).unwrap() {
                Attempted::Locked(locked, token) => {
                    assert_eq!(token, expected);
                    assert_eq!(
                        holder(&path).unwrap(),
                        Holder::Held(record(token, "me/1/x", "v\n1"))
                    );
                    drop(locked);
                }
                Attempted::Busy => panic!("free file reported busy"),
            }
            assert_eq!(holder(&path).unwrap(), Holder::Free);
        }
        assert_eq!(
            fs::read(&path).unwrap(),
            record::encode(3, "me/1/x", "v\n1", 0)
        );
    }

    #[test]
    fn a_shorter_record_is_padded_and_still_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let mut locked = lock_free(&path, false);
        locked
            .write_record(9, "a-much-longer-owner/1/x", "a long value")
            .unwrap();
        let long = fs::metadata(&path).unwrap().len();
        locked
            .write_record(9, "a-much-longer-owner/1/x", "")
            .unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), long, "padded");
        assert_eq!(
            holder(&path).unwrap(),
            Holder::Held(record(9, "a-much-longer-owner/1/x", ""))
        );
        drop(locked);
        match lock_and_stamp(&path, "me/1/y", "", false).unwrap() {
            Attempted::Locked(_locked, token) => {
                assert_eq!(token, 10);
                assert_eq!(fs::metadata(&path).unwrap().len(), long, "padded");
                assert_eq!(
                    holder(&path).unwrap(),
                    Holder::Held(record(10, "me/1/y", ""))
                );
            }
            Attempted::Busy => panic!("free file reported busy"),
        }
    }

    #[test]
    fn files_of_the_older_format_keep_counting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        fs::write(&path, "41\nold/1/u\n").unwrap();
        let file = open_creating(&path).unwrap();
        assert!(flock(&file, libc::LOCK_EX | libc::LOCK_NB).unwrap());
        assert_eq!(
            holder(&path).unwrap(),
            Holder::Held(record(41, "old/1/u", ""))
        );
        drop(file);
        match lock_and_stamp(&path, "new/1/u", "v", false).unwrap() {
            Attempted::Locked(_locked, token) => assert_eq!(token, 42),
            Attempted::Busy => panic!("free file reported busy"),
        }
    }

    #[test]
    fn a_long_record_is_covered_whole_by_the_next_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let value = "x".repeat(lock_core::MAX_VALUE_LEN);
        drop(lock_and_stamp(&path, "a", &value, false).unwrap());
        let long = fs::metadata(&path).unwrap().len();
        assert!(long as usize > FIRST_READ_LEN);
        match lock_and_stamp(&path, "b", "", false).unwrap() {
            Attempted::Locked(_locked, token) => {
                assert_eq!(token, 2);
                assert_eq!(fs::metadata(&path).unwrap().len(), long);
                assert_eq!(holder(&path).unwrap(), Holder::Held(record(2, "b", "")));
            }
            Attempted::Busy => panic!("free file reported busy"),
        }
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
        match lock_and_stamp(path, "a", "", fsync).unwrap() {
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
            lock_and_stamp(&path, "b", "", false).unwrap(),
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
        assert!(lock_and_stamp(&path, "a", "", false).is_err());
        assert_eq!(fs::read_to_string(&target).unwrap(), "keep me");
    }
}
