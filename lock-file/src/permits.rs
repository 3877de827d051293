//! Semaphores: `K.permits/`, a directory of slot files `0` … `limit − 1`,
//! each a lock file whose `LOCK_EX` is one permit, and `meta`, holding
//! the limit and the token counter.
//!
//! A request locks `meta` (`LOCK_EX`, held only for the few system calls
//! of the attempt, never while waiting), checks the stored limit against
//! its own while any permit is held, takes the first free slot below its
//! limit with `LOCK_EX|LOCK_NB`, stamps it with the next token and writes
//! `meta` back. A dead holder's slot is free as soon as its process ends.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::lockfile::{self, flock, open_creating, LockedFile};
use crate::record::Record;

/// Suffix of a semaphore's directory, beside the lock file of its name.
const PERMITS_SUFFIX: &str = ".permits";
/// The first line of `meta`.
const META_HEADER: &str = "distlock semaphore";

/// The directory of the semaphore whose name's lock file is `path`.
pub(crate) fn permits_dir(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let stem = name
        .strip_suffix(crate::names::LOCK_SUFFIX)
        .unwrap_or(&name);
    path.with_file_name(format!("{stem}{PERMITS_SUFFIX}"))
}

/// What one permit attempt found.
#[derive(Debug)]
pub(crate) enum PermitAttempt {
    /// A permit: its locked slot file, the slot's path, the token.
    Taken(LockedFile, PathBuf, u64),
    /// Every slot below the limit is held.
    Busy,
    /// Permits are held under another limit.
    Mismatch {
        /// The limit they were taken under.
        stored: u32,
    },
}

/// One attempt to take a permit of the semaphore in `dir` under `limit`.
pub(crate) fn take_permit(
    dir: &Path,
    limit: u32,
    owner: &str,
    value: &str,
    fsync: bool,
) -> io::Result<PermitAttempt> {
    let meta = open_creating(&dir.join("meta"))?;
    flock(&meta, libc::LOCK_EX)?;
    let (stored, counter) = read_meta(&meta)?;
    let mut free = None;
    let mut held = 0u32;
    for slot in 0..stored.unwrap_or(0).max(limit) {
        let path = dir.join(slot.to_string());
        let file = open_creating(&path)?;
        if !flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
            held += 1;
        } else if slot < limit && free.is_none() {
            free = Some((file, path));
        }
    }
    if let Some(stored) = stored.filter(|&stored| stored != limit && held > 0) {
        return Ok(PermitAttempt::Mismatch { stored });
    }
    let Some((file, path)) = free else {
        return Ok(PermitAttempt::Busy);
    };
    let token = counter.checked_add(1).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "token counter is at its maximum",
        )
    })?;
    let (_, previous_len) = lockfile::read_token(&file)?;
    let mut slot = LockedFile::new(file, previous_len);
    slot.write_record(token, owner, value)?;
    write_meta(&meta, limit, token)?;
    if fsync {
        slot.file().sync_data()?;
        meta.sync_data()?;
    }
    Ok(PermitAttempt::Taken(slot, path, token))
}

/// The records of the held permits of the semaphore in `dir`, oldest
/// first, and the limit they were taken under.
pub(crate) fn holders(dir: &Path) -> io::Result<(Vec<Record>, u32)> {
    let meta = match File::open(dir.join("meta")) {
        Ok(meta) => meta,
        Err(error) if lockfile::is_missing(&error) => return Ok((Vec::new(), 0)),
        Err(error) => return Err(error),
    };
    let (stored, _) = read_meta(&meta)?;
    let mut records = Vec::new();
    for slot in 0..stored.unwrap_or(0) {
        if let lockfile::Holder::Held(Some(record)) = lockfile::holder(&dir.join(slot.to_string()))?
        {
            records.push(record);
        }
    }
    records.sort_by_key(|record| record.token);
    Ok((records, stored.unwrap_or(0)))
}

/// `meta`'s stored limit (`None`: never written) and token counter.
fn read_meta(meta: &File) -> io::Result<(Option<u32>, u64)> {
    let mut buf = [0u8; 128];
    let len = meta.read_at(&mut buf, 0)?;
    let text = String::from_utf8_lossy(&buf[..len]);
    let mut lines = text.lines();
    if lines.next() != Some(META_HEADER) {
        return Ok((None, 0));
    }
    let mut field = |name: &str| -> io::Result<u64> {
        lines
            .next()
            .and_then(|line| line.strip_prefix(name))
            .and_then(|number| number.trim().parse().ok())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the semaphore's meta file has no valid `{name}` line"),
                )
            })
    };
    let limit = field("limit")?;
    let counter = field("counter")?;
    Ok((u32::try_from(limit).ok(), counter))
}

fn write_meta(meta: &File, limit: u32, counter: u64) -> io::Result<()> {
    let text = format!("{META_HEADER}\nlimit {limit}\ncounter {counter}\n");
    meta.write_all_at(text.as_bytes(), 0)?;
    meta.set_len(text.len() as u64)
}
