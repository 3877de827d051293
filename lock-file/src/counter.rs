//! The fencing counters: [`BUCKETS`] small files per namespace directory,
//! `.tokens-0` … `.tokens-f`, each holding one counter that every name
//! hashed to it draws its tokens from.
//!
//! A token is drawn while the drawer holds the name's lock (or, for a
//! semaphore, its `meta` file), under the bucket file's own `flock`:
//! read the counter, take one more than both it and the floor the caller
//! passes (the token a lock file of an earlier version still records),
//! write that back. Readers of one name, which share its lock, also write
//! their record into the lock file while they hold the counter's lock, one
//! at a time. Every token of a name therefore exceeds every token
//! drawn for it before, whichever process drew it, and the counter does
//! not depend on the name's own files: they can be removed once the name
//! is free without tokens starting again.
//!
//! The record is 20 digits and a newline, always written whole at offset
//! 0 (`pwrite`), and only read and written under the file's `flock`, so a
//! reader never sees half of one. With `fsync`, the file is `fdatasync`ed
//! before the token is used, and a new bucket file's directory entries are
//! synced too.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::create::{open_creating, sync_dir, Disk};
use crate::lockfile::flock;

/// How many counter files a namespace directory holds at most.
pub const BUCKETS: usize = 16;
/// The start of every counter file's name; a hex digit follows.
pub(crate) const BUCKET_PREFIX: &str = ".tokens-";
/// Length of a counter record: 20 digits (any `u64`) and a newline.
const RECORD_LEN: usize = 21;

/// The counter file of the name whose lock file (or semaphore directory)
/// is `path`: chosen by a hash of the name's encoded key, the same in
/// every process and version.
pub(crate) fn bucket_path(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().as_encoded_bytes();
    // The encoded key: the name up to its suffix (`.lock`, `.permits`, …);
    // encoded keys contain no dot.
    let stem = name.split(|&b| b == b'.').next().unwrap_or_default();
    path.with_file_name(format!("{BUCKET_PREFIX}{:x}", fnv1a(stem) % BUCKETS as u64))
}

/// 64-bit FNV-1a: a fixed function, so every process picks the same
/// bucket for a name.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The counter of one name's bucket, locked (`flock`) while this lives.
#[derive(Debug)]
pub(crate) struct Counter {
    file: File,
    path: PathBuf,
    value: u64,
    /// The file was empty: its entries must be synced with `fsync`.
    fresh: bool,
    disk: Disk,
}

impl Counter {
    /// Locks the counter of the name whose lock file (or other file) is
    /// `path`, creating its file if missing, and reads it. A record that
    /// does not read is an error naming the file (removing it would
    /// restart the tokens of every name it counts).
    pub(crate) fn lock(path: &Path, disk: Disk) -> io::Result<Self> {
        let bucket = bucket_path(path);
        let file = open_creating(&bucket, disk.sharing).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("token counter `{}`: {error}", bucket.display()),
            )
        })?;
        flock(&file, libc::LOCK_EX)?;
        let (value, fresh) = read(&file).map_err(|e| damaged(&bucket, e))?;
        Ok(Self {
            file,
            path: bucket,
            value,
            fresh,
            disk,
        })
    }

    /// Takes the next token: one more than the larger of the counter and
    /// `floor` (a token recorded by an earlier version), written back (and
    /// synced with `fsync`) before returning.
    pub(crate) fn next(&mut self, floor: u64) -> io::Result<u64> {
        let token = self.value.max(floor).checked_add(1).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "token counter is at its maximum",
            )
        })?;
        self.store(token)?;
        Ok(token)
    }

    /// Raises the counter to at least `token` (a token recorded in a file
    /// about to be removed), so no later token is lower.
    pub(crate) fn raise(&mut self, token: u64) -> io::Result<()> {
        if token > self.value || self.fresh {
            self.store(token.max(self.value))?;
        }
        Ok(())
    }

    fn store(&mut self, value: u64) -> io::Result<()> {
        self.file
            .write_all_at(format!("{value:020}\n").as_bytes(), 0)?;
        if self.disk.fsync {
            self.file.sync_data()?;
            if self.fresh {
                sync_new_entries(&self.path)?;
            }
        }
        (self.value, self.fresh) = (value, false);
        Ok(())
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        // As for lock files: a forked child may share the descriptor.
        let _ = flock(&self.file, libc::LOCK_UN);
    }
}

/// Draws the next token of the name whose lock file is `path` (see
/// [`Counter::next`]). The caller holds the name's lock.
pub(crate) fn draw(path: &Path, floor: u64, disk: Disk) -> io::Result<u64> {
    Counter::lock(path, disk)?.next(floor)
}

/// Raises the counter of `path`'s name to at least `token` (see
/// [`Counter::raise`]).
pub(crate) fn raise(path: &Path, token: u64, disk: Disk) -> io::Result<()> {
    Counter::lock(path, disk)?.raise(token)
}

/// The counter in `file` and whether the file is new (empty).
fn read(file: &File) -> io::Result<(u64, bool)> {
    let mut buf = [0u8; RECORD_LEN + 1];
    let len = file.read_at(&mut buf, 0)?;
    if len == 0 {
        return Ok((0, true));
    }
    std::str::from_utf8(&buf[..len])
        .ok()
        .filter(|text| len == RECORD_LEN && text.ends_with('\n'))
        .and_then(|text| text.trim_end().parse::<u64>().ok())
        .map(|counter| (counter, false))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a counter record"))
}

fn damaged(bucket: &Path, error: io::Error) -> io::Error {
    io::Error::new(
        error.kind(),
        format!(
            "the token counter `{}` is damaged ({error}); tokens of the names it counts would start again if it were removed",
            bucket.display()
        ),
    )
}

/// Makes a new counter file's directory entry, and that of its namespace
/// directory, survive a machine crash.
fn sync_new_entries(bucket: &Path) -> io::Result<()> {
    let namespace = bucket.parent().unwrap_or(Path::new("/"));
    sync_dir(namespace)?;
    match namespace.parent() {
        Some(root) => sync_dir(root),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::create::Sharing;

    const DISK: Disk = Disk {
        sharing: Sharing::Private,
        fsync: false,
    };

    #[test]
    fn a_name_and_its_semaphore_share_a_bucket_that_never_changes() {
        let lock = Path::new("/d/ns/invoices%2F7.lock");
        assert_eq!(
            bucket_path(lock),
            bucket_path(Path::new("/d/ns/invoices%2F7.permits"))
        );
        assert_eq!(bucket_path(lock).parent(), lock.parent());
        // Pinned: a different hash would restart every name's counter.
        assert_eq!(fnv1a(b"invoices%2F7") % BUCKETS as u64, 1);
        assert_eq!(bucket_path(lock), Path::new("/d/ns/.tokens-1"));
    }

    #[test]
    fn names_spread_over_every_bucket() {
        let used: std::collections::BTreeSet<_> = (0..200)
            .map(|i| bucket_path(Path::new(&format!("/d/ns/k{i}.lock"))))
            .collect();
        assert_eq!(used.len(), BUCKETS);
    }

    #[test]
    fn draws_count_up_from_the_floor_and_raise_never_lowers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ns").join("k.lock");
        assert_eq!(draw(&path, 0, DISK).unwrap(), 1);
        assert_eq!(draw(&path, 0, DISK).unwrap(), 2);
        assert_eq!(draw(&path, 500, DISK).unwrap(), 501);
        raise(&path, 7, DISK).unwrap();
        assert_eq!(draw(&path, 0, DISK).unwrap(), 502);
        raise(&path, 900, DISK).unwrap();
        assert_eq!(draw(&path, 0, DISK).unwrap(), 901);
        let record = std::fs::read_to_string(bucket_path(&path)).unwrap();
        assert_eq!(record, "00000000000000000901\n");
    }

    #[test]
    fn a_damaged_counter_is_an_error_naming_it_not_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        std::fs::write(bucket_path(&path), "12\n").unwrap();
        let error = draw(&path, 0, DISK).unwrap_err();
        assert!(error.to_string().contains(".tokens-"), "{error}");
        assert_eq!(std::fs::read_to_string(bucket_path(&path)).unwrap(), "12\n");
    }

    #[test]
    fn the_counter_stops_at_its_maximum() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        raise(&path, u64::MAX, DISK).unwrap();
        assert!(draw(&path, 0, DISK).is_err());
    }
}
