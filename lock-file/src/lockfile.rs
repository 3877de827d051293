//! The system calls on one lock file: `flock(2)`, reading and writing its
//! [`record`], the check that the file still stands at its
//! path, and removing it while locked.
//!
//! Everything here is synchronous and short: non-blocking `flock`, and
//! reads/writes of a record (a few dozen bytes, up to ~4 KiB with the
//! longest value).
//!
//! # Removing files of free names
//!
//! A lock file is removed by whoever frees its name, *while holding* its
//! `LOCK_EX`: unlink, then unlock. Every acquirer, once its `flock`
//! succeeds, checks that the path still names the inode it locked
//! ([`LockedFile::still_stands`]: `fstat` against `lstat`, device and
//! inode, and a link count above zero) and otherwise opens the path
//! afresh. So two holders never overlap:
//!
//! * a holder `H` verified, after its `flock`, that the path named its
//!   inode `I`. Only someone holding `I`'s lock unlinks it (a release, or
//!   a probe that found it free), and `H` holds that lock until its own
//!   release; so from `H`'s check until `H`'s release the path names `I`
//!   (the inode number cannot be reused while `H` keeps `I` open);
//! * an acquirer that opened `I` before the unlink gets its `flock` only
//!   after the unlock, then finds the path gone or naming another inode,
//!   and starts again; one that opens the path after the unlink creates a
//!   new file, and the two of them contend on it;
//! * so any two holders at the same moment hold the lock of the same
//!   inode, which `flock` makes impossible for `LOCK_EX`.
//!
//! The readers that do not lock:
//!
//! * a holder's loss check ([`LockedFile::still_stands`], every check
//!   interval) sees its file stand until its own release; only a removal
//!   by someone else (an operator, a purge) makes it report the lock lost;
//! * `inspect` and watches open the path without creating it: before the
//!   unlink they probe the old file (held: its holder's record; free: the
//!   probe removes it itself, as below), after it they find nothing (free)
//!   or the next holder's new file. A probe whose lock fails on a file
//!   that no longer stands (its holder is removing it) looks again;
//! * a watch's inotify watch is on the namespace directory, not on the
//!   file, so it sees the removal (a directory event) and every later
//!   file at the path.
//!
//! Shared holders (read locks, waiting writers' marks on a gate, probes)
//! cannot know whether they are the last. Each leaves through
//! [`LockedFile::leave_shared`]: unlock, then try `LOCK_EX|LOCK_NB`; the
//! one that gets it holds the file alone and removes it as above. Of
//! shared holders leaving at the same time, each unlocks before it tries,
//! so the last one to try finds none of the others' locks: it gets the
//! lock unless a new holder came in, who will leave the same way later.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::names::{numbered, sibling, LEGACY_READERS_SUFFIX, READER_SUFFIX};
use crate::record;

/// The most of a lock file a reader reads: a record with the longest owner
/// and value fits well within it.
pub(crate) const MAX_READ_LEN: usize = 16 * 1024;
/// What an acquisition reads at first: enough for any record without a
/// long value, on the stack.
const FIRST_READ_LEN: usize = 1024;

/// An open lock file whose `flock` we hold. Dropping it unlocks and
/// closes, synchronously; removing it is up to the hold that owns it.
#[derive(Debug)]
pub(crate) struct LockedFile {
    file: File,
    /// Where the file was opened.
    path: PathBuf,
    /// How much of the file our next record must cover: the longest
    /// record written since we locked it, or what the file held then.
    len: usize,
}

impl LockedFile {
    /// `file`, opened at `path`, whose `flock` the caller holds, with a
    /// record covering `len` bytes.
    pub(crate) fn new(file: File, path: &Path, len: usize) -> Self {
        Self {
            file,
            path: path.to_owned(),
            len,
        }
    }

    /// The open file.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// Where it was opened.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Makes the next record cover at least `len` bytes (what the file
    /// holds now).
    pub(crate) fn set_len(&mut self, len: usize) {
        self.len = len;
    }

    /// Whether the file at our path is still the one we locked: the path
    /// names our inode and the inode was not unlinked. A missing path (or a
    /// missing directory on the way) means it does not.
    pub(crate) fn still_stands(&self) -> io::Result<bool> {
        stands(&self.file, &self.path)
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

    /// Holding `LOCK_EX`: if the file still stands, runs `beside` (which
    /// removes what the name keeps beside the file) and unlinks the file.
    /// Returns whether it stood; the lock is let go when this is dropped.
    pub(crate) fn remove_if_standing(
        &self,
        beside: impl FnOnce(&Path) -> io::Result<()>,
    ) -> io::Result<bool> {
        if !self.still_stands()? {
            return Ok(false);
        }
        beside(&self.path)?;
        match fs::remove_file(&self.path) {
            Err(error) if !is_missing(&error) => Err(error),
            _ => Ok(true),
        }
    }

    /// Holding `LOCK_SH`: lets go of it, and if nobody holds the file then
    /// (`LOCK_EX|LOCK_NB` succeeds) removes it as
    /// [`remove_if_standing`](Self::remove_if_standing) does. See the
    /// module docs for why the last of several leaving holders removes it.
    pub(crate) fn leave_shared(
        &self,
        beside: impl FnOnce(&Path) -> io::Result<()>,
    ) -> io::Result<()> {
        flock(&self.file, libc::LOCK_UN)?;
        if flock(&self.file, libc::LOCK_EX | libc::LOCK_NB)? {
            self.remove_if_standing(beside)?;
        }
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

/// Whether `path` names the inode `file` has open, and that inode was not
/// unlinked. A missing path (or a missing directory on the way) means it
/// does not.
pub(crate) fn stands(file: &File, path: &Path) -> io::Result<bool> {
    let ours = file.metadata()?;
    if ours.nlink() == 0 {
        return Ok(false);
    }
    match fs::symlink_metadata(path) {
        Ok(now) => Ok(now.dev() == ours.dev() && now.ino() == ours.ino()),
        Err(error) if is_missing(&error) => Ok(false),
        Err(error) => Err(error),
    }
}

/// Runs what a unit test set to happen between an acquirer's `open` of a
/// lock file and its `flock` (another holder's release, say), once: the
/// interleaving that the standing check after `flock` exists for.
#[cfg(test)]
pub(crate) fn between_open_and_flock() {
    let hook = BETWEEN_OPEN_AND_FLOCK.with(|hook| hook.borrow_mut().take());
    if let Some(hook) = hook {
        hook();
    }
}

#[cfg(not(test))]
#[inline(always)]
pub(crate) fn between_open_and_flock() {}

#[cfg(test)]
thread_local! {
    /// See [`between_open_and_flock`].
    pub(crate) static BETWEEN_OPEN_AND_FLOCK: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        std::cell::RefCell::new(None);
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
pub(crate) fn read_all(file: &File) -> io::Result<Vec<u8>> {
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

pub(crate) fn no_token() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "the file does not start with a fencing token line",
    )
}

/// `path` opened read-only without following a symlink, `None` if it does
/// not exist.
pub(crate) fn open_existing(path: &Path) -> io::Result<Option<File>> {
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(file) => Ok(Some(file)),
        Err(error) if is_missing(&error) => Ok(None),
        Err(error) => Err(error),
    }
}

/// Whether `error` means the path (or a directory on it) does not exist.
pub(crate) fn is_missing(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::NotFound || error.raw_os_error() == Some(libc::ENOTDIR)
}

/// Removes what the lock file `path` keeps beside it for readers: the
/// reader slots `K.reader-0`, `K.reader-1`, … and the readers' directory
/// of earlier versions. Called by whoever holds the lock file with
/// `LOCK_EX`: then no reader lives, so every slot is free.
pub(crate) fn remove_reader_slots(path: &Path) -> io::Result<()> {
    remove_numbered(path, READER_SUFFIX)?;
    let legacy = sibling(path, LEGACY_READERS_SUFFIX);
    match fs::remove_dir_all(&legacy) {
        Err(error) if !is_missing(&error) => Err(error),
        _ => Ok(()),
    }
}

/// Removes the numbered siblings `K<suffix>0`, `K<suffix>1`, … of
/// `path`, from the last one down, so that what an interrupted removal
/// leaves still starts at 0 (slots are created lowest first, so they are
/// always numbered from 0 without gaps, and the first missing number ends
/// them).
pub(crate) fn remove_numbered(path: &Path, suffix: &str) -> io::Result<()> {
    let count = (0..)
        .find(|&n| fs::symlink_metadata(numbered(path, suffix, n)).is_err())
        .unwrap_or(0);
    for n in (0..count).rev() {
        match fs::remove_file(numbered(path, suffix, n)) {
            Err(error) if !is_missing(&error) => return Err(error),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locked(path: &Path) -> LockedFile {
        let file = crate::create::open_creating(path, crate::create::Sharing::Private).unwrap();
        assert!(flock(&file, libc::LOCK_SH | libc::LOCK_NB).unwrap());
        LockedFile::new(file, path, 0)
    }

    #[test]
    fn a_removed_or_replaced_file_no_longer_stands() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let held = locked(&path);
        assert!(held.still_stands().unwrap());
        fs::remove_file(&path).unwrap();
        assert!(!held.still_stands().unwrap());
        fs::write(&path, "").unwrap();
        assert!(!held.still_stands().unwrap());
    }

    /// The last of several shared holders to leave removes the file, and
    /// only the last.
    #[test]
    fn the_last_shared_holder_out_removes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let (first, second) = (locked(&path), locked(&path));
        first.leave_shared(|_| Ok(())).unwrap();
        assert!(path.exists(), "removed while another holder is in");
        second.leave_shared(|_| Ok(())).unwrap();
        assert!(!path.exists());
    }

    /// A failed `LOCK_EX|LOCK_NB` after letting go holds nothing, so two
    /// holders leaving at once cannot both keep the file.
    #[test]
    fn leaving_holders_never_keep_each_other_in() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        for _ in 0..200 {
            let (first, second) = (locked(&path), locked(&path));
            let other = std::thread::spawn(move || second.leave_shared(|_| Ok(())).unwrap());
            first.leave_shared(|_| Ok(())).unwrap();
            other.join().unwrap();
            assert!(!path.exists());
        }
    }

    #[test]
    fn removing_while_held_takes_reader_slots_along() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        // Slots of readers gone (or dead), and an earlier version's
        // readers' directory.
        for slot in ["k.reader-0", "k.reader-1"] {
            fs::write(dir.path().join(slot), "gone").unwrap();
        }
        let readers = dir.path().join("k.readers");
        fs::create_dir(&readers).unwrap();
        fs::write(readers.join("7"), "dead").unwrap();
        let file = crate::create::open_creating(&path, crate::create::Sharing::Private).unwrap();
        assert!(flock(&file, libc::LOCK_EX | libc::LOCK_NB).unwrap());
        let held = LockedFile::new(file, &path, 0);
        assert!(held.remove_if_standing(remove_reader_slots).unwrap());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(!held.remove_if_standing(remove_reader_slots).unwrap());
    }
}
