//! Semaphores: beside the lock file `K.lock` of their name, the file
//! `K.semaphore` holding the limit (and the last token issued), and slot
//! files `K.permit-0` … `K.permit-<limit − 1>`, each a lock file whose
//! `LOCK_EX` is one permit.
//!
//! A request locks `K.semaphore` (`LOCK_EX`, held only for the few system
//! calls of the attempt, never while waiting), checks the stored limit
//! against its own while any permit is held, takes the first free slot
//! below its limit with `LOCK_EX|LOCK_NB` (creating the slots up to the
//! limit, lowest first), stamps it with the next token from the name's
//! [token counter](crate::counter) and writes the limit back. A dead holder's
//! slot is free as soon as its process ends.
//!
//! A release locks `K.semaphore` too, then probes the other slots: if none
//! is held, it removes every slot and `K.semaphore`, still holding all
//! those locks, so the stored limit goes with the last permit and nothing
//! stays once the semaphore is free. Under that lock no attempt runs and
//! no listing probes (listings lock it shared), so a slot whose lock is
//! taken is a live permit; slots are numbered from 0 without gaps, so the
//! first missing number ends them. Whoever locks `K.semaphore` checks
//! afterwards that it still stands, and otherwise opens it afresh: an
//! attempt waiting on a file that a release removed then starts a new one.
//!
//! Earlier versions kept a semaphore in a directory `K.permits/` whose
//! `meta` held the token counter: a new semaphore file takes that counter
//! as the floor of its tokens and removes the old directory.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::counter;
use crate::create::{open_creating, Disk};
use crate::exclusive::MAX_REOPENS;
use crate::lockfile::{self, flock, is_missing, remove_numbered, LockedFile};
use crate::names::{numbered, sibling, LEGACY_PERMITS_SUFFIX, PERMIT_SUFFIX, SEMAPHORE_SUFFIX};
use crate::probe::{self, OnFree};
use crate::record::Record;

/// The first line of the semaphore file.
const META_HEADER: &str = "distlock semaphore";

/// A permit: its locked slot file. Dropping it gives the permit back,
/// removing the semaphore's files if it was the last one held.
#[derive(Debug)]
pub(crate) struct Permit {
    /// `None` once given back.
    slot: Option<LockedFile>,
    /// The lock file of the semaphore's name.
    name: PathBuf,
}

impl Permit {
    /// The locked slot file.
    pub(crate) fn locked(&self) -> Option<&LockedFile> {
        self.slot.as_ref()
    }

    /// The locked slot file, to write a new record.
    pub(crate) fn locked_mut(&mut self) -> Option<&mut LockedFile> {
        self.slot.as_mut()
    }

    /// Gives the permit back; whether the slot still stood (was ours).
    pub(crate) fn release(mut self) -> io::Result<bool> {
        self.leave().unwrap_or(Ok(false))
    }

    fn leave(&mut self) -> Option<io::Result<bool>> {
        let slot = self.slot.take()?;
        Some(give_back(slot, &self.name))
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.leave();
    }
}

/// What one permit attempt found.
#[derive(Debug)]
pub(crate) enum PermitAttempt {
    /// A permit, and its token.
    Taken(Permit, u64),
    /// Every slot below the limit is held.
    Busy,
    /// Permits are held under another limit.
    Mismatch {
        /// The limit they were taken under.
        stored: u32,
    },
}

/// One attempt to take a permit under `limit` of the semaphore of the
/// name whose lock file is `path`.
pub(crate) fn take_permit(
    path: &Path,
    limit: u32,
    owner: &str,
    value: &str,
    disk: Disk,
) -> io::Result<PermitAttempt> {
    let meta = lock_meta(path, libc::LOCK_EX, Some(disk))?
        .ok_or_else(|| io::Error::other("the semaphore file vanished"))?;
    let (stored, mut floor) = read_meta(meta.file())?;
    if stored.is_none() {
        floor = floor.max(absorb_legacy(path)?);
    }
    let mut free = None;
    let mut held = 0u32;
    for number in 0..stored.unwrap_or(0).max(limit) {
        let slot_path = numbered(path, PERMIT_SUFFIX, number);
        let file = open_creating(&slot_path, disk.sharing)?;
        if !flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
            held += 1;
        } else if number < limit && free.is_none() {
            free = Some(LockedFile::new(file, &slot_path, 0));
        }
    }
    if let Some(stored) = stored.filter(|&stored| stored != limit && held > 0) {
        return Ok(PermitAttempt::Mismatch { stored });
    }
    let Some(mut slot) = free else {
        return Ok(PermitAttempt::Busy);
    };
    let token = counter::draw(path, floor, disk)?;
    let (_, previous_len) = lockfile::read_token(slot.file())?;
    slot.set_len(previous_len);
    // On an error from here the slot is only unlocked: a release would
    // wait for the lock on the semaphore file that we hold.
    slot.write_record(token, owner, value)?;
    write_meta(meta.file(), limit, token)?;
    drop(meta);
    let permit = Permit {
        slot: Some(slot),
        name: path.to_owned(),
    };
    Ok(PermitAttempt::Taken(permit, token))
}

/// Gives back the permit of `slot` of the semaphore of `name` (see the
/// module docs); whether the slot still stood.
fn give_back(slot: LockedFile, name: &Path) -> io::Result<bool> {
    if !slot.still_stands()? {
        return Ok(false);
    }
    // Without the semaphore file (removed by hand) there is nothing to
    // tidy.
    let Some(meta) = lock_meta(name, libc::LOCK_EX, None)? else {
        return Ok(true);
    };
    // The other slots, each locked until everything is removed.
    let mut others = Vec::new();
    for number in 0.. {
        let path = numbered(name, PERMIT_SUFFIX, number);
        if path == slot.path() {
            continue;
        }
        let Some(file) = open_rw(&path)? else {
            break;
        };
        if !flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
            // A live permit: it will tidy up.
            return Ok(true);
        }
        others.push(LockedFile::new(file, &path, 0));
    }
    remove_numbered(name, PERMIT_SUFFIX)?;
    meta.remove_if_standing(|_| Ok(()))?;
    drop(others);
    Ok(true)
}

/// The records of the held permits of the semaphore of the name whose
/// lock file is `path`, oldest first, and the limit they were taken
/// under. Holds the semaphore file shared while it probes, so no attempt
/// or release runs meanwhile.
pub(crate) fn holders(path: &Path) -> io::Result<(Vec<Record>, u32)> {
    let Some(meta) = lock_meta(path, libc::LOCK_SH, None)? else {
        return Ok((Vec::new(), 0));
    };
    let (stored, _) = read_meta(meta.file())?;
    let mut records = Vec::new();
    for number in 0..stored.unwrap_or(0) {
        let slot = numbered(path, PERMIT_SUFFIX, number);
        if let probe::Holder::Held(Some(record)) = probe::holder(&slot, OnFree::Keep)? {
            records.push(record);
        }
    }
    records.sort_by_key(|record| record.token);
    Ok((records, stored.unwrap_or(0)))
}

/// The semaphore file of the name whose lock file is `path`, locked with
/// `operation` (blocking: it is held for a few system calls at a time)
/// and checked to still stand. Created if missing when `create` is given;
/// else `None` if it does not exist.
fn lock_meta(
    path: &Path,
    operation: libc::c_int,
    create: Option<Disk>,
) -> io::Result<Option<LockedFile>> {
    let meta_path = sibling(path, SEMAPHORE_SUFFIX);
    for _ in 0..MAX_REOPENS {
        let file = match create {
            Some(disk) => open_creating(&meta_path, disk.sharing)?,
            None => match open_rw(&meta_path)? {
                Some(file) => file,
                None => return Ok(None),
            },
        };
        flock(&file, operation)?;
        let meta = LockedFile::new(file, &meta_path, 0);
        if meta.still_stands()? {
            return Ok(Some(meta));
        }
    }
    Err(io::Error::other(format!(
        "`{}` was replaced on every attempt to lock it",
        meta_path.display()
    )))
}

/// The token counter of an earlier version's semaphore directory
/// `K.permits/` (0 if there is none), which is then removed.
fn absorb_legacy(path: &Path) -> io::Result<u64> {
    let dir = sibling(path, LEGACY_PERMITS_SUFFIX);
    let counter = match File::open(dir.join("meta")) {
        Ok(meta) => read_meta(&meta)?.1,
        Err(error) if is_missing(&error) => return Ok(0),
        Err(error) => return Err(error),
    };
    fs::remove_dir_all(&dir)?;
    Ok(counter)
}

/// An existing file opened read-write (read-only if we may not write
/// it: enough to lock it), `None` if it does not exist.
fn open_rw(path: &Path) -> io::Result<Option<File>> {
    let open = |write| {
        OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
    };
    match open(true).or_else(|error| match error.kind() {
        io::ErrorKind::PermissionDenied => open(false),
        _ => Err(error),
    }) {
        Ok(file) => Ok(Some(file)),
        Err(error) if is_missing(&error) => Ok(None),
        Err(error) => Err(error),
    }
}

/// The semaphore file's stored limit (`None`: never written) and last
/// token.
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
                    format!("the semaphore file has no valid `{name}` line"),
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
