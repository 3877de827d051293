//! Semaphores: `K.permits/`, a directory of slot files `0` … `limit − 1`,
//! each a lock file whose `LOCK_EX` is one permit, and `meta`, holding
//! the limit (and the last token issued).
//!
//! A request locks `meta` (`LOCK_EX`, held only for the few system calls
//! of the attempt, never while waiting), checks the stored limit against
//! its own while any permit is held, takes the first free slot below its
//! limit with `LOCK_EX|LOCK_NB`, stamps it with the next token from the
//! name's [counter](crate::counter) and writes `meta` back. A dead
//! holder's slot is free as soon as its process ends.
//!
//! A release locks `meta` too, then probes the other slots: if none is
//! held, it removes every slot file, `meta` and the directory, still
//! holding all those locks, so the stored limit goes with the last permit
//! and nothing stays once the semaphore is free. Under `meta`'s lock no
//! attempt runs and no listing probes (listings lock `meta` shared), so a
//! slot whose lock is taken is a live permit. Whoever locks `meta` checks
//! afterwards that it still stands, and otherwise opens it afresh: an
//! attempt waiting on a `meta` that a release removed then creates the
//! directory anew.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::counter;
use crate::create::{is_temporary, open_creating, Disk};
use crate::exclusive::MAX_REOPENS;
use crate::lockfile::{self, flock, is_missing, LockedFile};
use crate::names::{sibling, PERMITS_SUFFIX};
use crate::probe::{self, OnFree};
use crate::record::Record;

/// The first line of `meta`.
const META_HEADER: &str = "distlock semaphore";
/// The name of the file holding the limit.
const META: &str = "meta";

/// The directory of the semaphore whose name's lock file is `path`.
pub(crate) fn permits_dir(path: &Path) -> PathBuf {
    sibling(path, PERMITS_SUFFIX)
}

/// A permit: its locked slot file. Dropping it gives the permit back,
/// removing the semaphore's files if it was the last one held.
#[derive(Debug)]
pub(crate) struct Permit {
    /// `None` once given back.
    slot: Option<LockedFile>,
    dir: PathBuf,
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
        Some(give_back(slot, &self.dir))
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
    let dir = permits_dir(path);
    let meta = lock_meta(&dir, libc::LOCK_EX, Some(disk))?
        .ok_or_else(|| io::Error::other("the semaphore's meta file vanished"))?;
    let (stored, counter) = read_meta(meta.file())?;
    let mut free = None;
    let mut held = 0u32;
    for slot in 0..stored.unwrap_or(0).max(limit) {
        let slot_path = dir.join(slot.to_string());
        let file = open_creating(&slot_path, disk.sharing)?;
        if !flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
            held += 1;
        } else if slot < limit && free.is_none() {
            free = Some(LockedFile::new(file, &slot_path, 0));
        }
    }
    if let Some(stored) = stored.filter(|&stored| stored != limit && held > 0) {
        return Ok(PermitAttempt::Mismatch { stored });
    }
    let Some(mut slot) = free else {
        return Ok(PermitAttempt::Busy);
    };
    let token = counter::draw(path, counter, disk)?;
    let (_, previous_len) = lockfile::read_token(slot.file())?;
    slot.set_len(previous_len);
    // On an error from here the slot is only unlocked: a release would
    // wait for the `meta` lock we hold.
    slot.write_record(token, owner, value)?;
    write_meta(meta.file(), limit, token)?;
    drop(meta);
    let permit = Permit {
        slot: Some(slot),
        dir,
    };
    Ok(PermitAttempt::Taken(permit, token))
}

/// Gives back the permit of `slot` (see the module docs); whether the
/// slot still stood.
fn give_back(slot: LockedFile, dir: &Path) -> io::Result<bool> {
    if !slot.still_stands()? {
        return Ok(false);
    }
    // Without `meta` (removed by hand) there is nothing to tidy.
    let Some(meta) = lock_meta(dir, libc::LOCK_EX, None)? else {
        return Ok(true);
    };
    let mut others = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_name() == META || path == slot.path() {
            continue;
        }
        if is_temporary(&entry.file_name()) {
            // A file being created when its process died: attempts
            // create slots only under `meta`, which we hold.
            let _ = fs::remove_file(&path);
            continue;
        }
        let Some(file) = open_rw(&path)? else {
            continue;
        };
        if !flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
            // A live permit: it will tidy up.
            return Ok(true);
        }
        others.push(LockedFile::new(file, &path, 0));
    }
    for other in &others {
        other.remove_if_standing(|_| Ok(()))?;
    }
    slot.remove_if_standing(|_| Ok(()))?;
    meta.remove_if_standing(|_| Ok(()))?;
    match fs::remove_dir(dir) {
        Err(error) if !is_missing(&error) => Err(error),
        _ => Ok(true),
    }
}

/// The records of the held permits of the semaphore in `dir`, oldest
/// first, and the limit they were taken under. Holds `meta` shared while
/// it probes, so no attempt or release runs meanwhile.
pub(crate) fn holders(dir: &Path) -> io::Result<(Vec<Record>, u32)> {
    let Some(meta) = lock_meta(dir, libc::LOCK_SH, None)? else {
        return Ok((Vec::new(), 0));
    };
    let (stored, _) = read_meta(meta.file())?;
    let mut records = Vec::new();
    for slot in 0..stored.unwrap_or(0) {
        if let probe::Holder::Held(Some(record)) =
            probe::holder(&dir.join(slot.to_string()), OnFree::Keep)?
        {
            records.push(record);
        }
    }
    records.sort_by_key(|record| record.token);
    Ok((records, stored.unwrap_or(0)))
}

/// `meta` of the semaphore in `dir`, locked with `operation` (blocking:
/// it is held for a few system calls at a time) and checked to still
/// stand. Created if missing when `create` is given; else `None` if it
/// does not exist.
fn lock_meta(
    dir: &Path,
    operation: libc::c_int,
    create: Option<Disk>,
) -> io::Result<Option<LockedFile>> {
    let path = dir.join(META);
    for _ in 0..MAX_REOPENS {
        let file = match create {
            Some(disk) => open_creating(&path, disk.sharing)?,
            None => match open_rw(&path)? {
                Some(file) => file,
                None => return Ok(None),
            },
        };
        flock(&file, operation)?;
        let meta = LockedFile::new(file, &path, 0);
        if meta.still_stands()? {
            return Ok(Some(meta));
        }
    }
    Err(io::Error::other(format!(
        "`{}` was replaced on every attempt to lock it",
        path.display()
    )))
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

/// `meta`'s stored limit (`None`: never written) and last token (the
/// token counter of earlier versions, which kept it here).
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
