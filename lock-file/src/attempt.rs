//! One attempt at any kind of hold: the name's lock alone (`LOCK_EX` on
//! the lock file), a read lock ([`crate::shared`]) or a permit
//! ([`crate::permits`]).

use std::io;
use std::path::{Path, PathBuf};

use lock_core::HoldKind;

use crate::lockfile::{self, Attempted, LockedFile};
use crate::permits::{self, PermitAttempt};
use crate::shared::{self, ReadAttempt, ReaderFile};

/// What one attempt found.
#[derive(Debug)]
pub(crate) enum Taken {
    /// Held now.
    Held(Hold),
    /// Not free now.
    Busy,
    /// The semaphore's permits are held under another limit.
    Mismatch {
        /// That limit.
        stored: u32,
    },
}

/// A hold just taken.
#[derive(Debug)]
pub(crate) struct Hold {
    /// The locked file: the lock file, or a permit's slot.
    pub(crate) file: LockedFile,
    /// Where that file lives (checked by renewals).
    pub(crate) path: PathBuf,
    /// A reader's own file.
    pub(crate) reader: Option<ReaderFile>,
    pub(crate) token: u64,
}

/// Takes a hold of `kind` on the name whose lock file is `path`.
pub(crate) fn attempt(
    path: &Path,
    kind: HoldKind,
    owner: &str,
    value: &str,
    fsync: bool,
) -> io::Result<Taken> {
    let taken = match kind {
        HoldKind::Shared => match shared::read_lock_and_stamp(path, owner, value, fsync)? {
            ReadAttempt::Busy => Taken::Busy,
            ReadAttempt::Locked(read) => Taken::Held(Hold {
                file: read.main,
                path: path.to_owned(),
                reader: Some(read.own),
                token: read.token,
            }),
        },
        HoldKind::Permit { limit } => {
            let dir = permits::permits_dir(path);
            match permits::take_permit(&dir, limit, owner, value, fsync)? {
                PermitAttempt::Busy => Taken::Busy,
                PermitAttempt::Mismatch { stored } => Taken::Mismatch { stored },
                PermitAttempt::Taken(file, slot, token) => Taken::Held(Hold {
                    file,
                    path: slot,
                    reader: None,
                    token,
                }),
            }
        }
        _ => match lockfile::lock_and_stamp(path, owner, value, fsync)? {
            Attempted::Busy => Taken::Busy,
            Attempted::Locked(file, token) => Taken::Held(Hold {
                file,
                path: path.to_owned(),
                reader: None,
                token,
            }),
        },
    };
    Ok(taken)
}
