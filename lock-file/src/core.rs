//! [`FileCore`]: what a file backend and its watches share — the lock
//! directory (as configured, and canonicalized), how files are created
//! in it, and reading a lock file's holder.
//!
//! The backend and its watches each keep a copy of it; this module uses
//! neither.

use std::fs::{self, DirBuilder};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lock_core::{FencingToken, LockError, LockInfo, LockName};

use crate::config::FileConfig;
use crate::create::{Disk, Sharing};
use crate::default_dir::writable;
use crate::errors;
use crate::names;
use crate::probe::{self, Holder, OnFree};
use crate::record::Record;
use crate::wakes::{wake_key, wakes};

/// Mode of a lock directory created by
/// [`FileBackend::open`](crate::FileBackend::open).
pub const DIR_MODE: u32 = 0o700;
/// What [`Backend::inspect`](lock_core::backend::Backend::inspect) reports
/// as owner of a lock file that is locked but was never stamped by
/// distlock (e.g. locked by another program).
pub const UNKNOWN_OWNER: &str = "unknown";
/// How long a reader keeps reading a record that does not check out
/// (because every read raced a write, or because it is damaged) before
/// reporting an error.
const UNSETTLED_PATIENCE: Duration = Duration::from_millis(250);
/// The pause between such reads, after the quick ones.
const UNSETTLED_PAUSE: Duration = Duration::from_millis(1);

/// One lock directory, opened.
#[derive(Clone, Debug)]
pub(crate) struct FileCore {
    /// The settings it was opened with.
    pub(crate) config: FileConfig,
    /// `config.dir`, canonicalized: one spelling per directory, so that
    /// wake-ups reach every backend of the process on that directory.
    pub(crate) root: PathBuf,
    /// The modes of what we create (from the directory's mode) and
    /// `config.fsync`.
    pub(crate) disk: Disk,
}

impl FileCore {
    /// Opens `config.dir`, creating it with [`DIR_MODE`] if missing; see
    /// [`FileBackend::open`](crate::FileBackend::open).
    pub(crate) fn open(config: FileConfig) -> Result<Self, LockError> {
        let dir = &config.dir;
        let problem = |what: &str, error: &io::Error| errors::dir_error(dir, what, error);
        match fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(LockError::invalid_config(format!(
                    "lock directory `{}` is not a directory",
                    dir.display()
                )))
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(dir)
                .map_err(|e| problem("cannot be created", &e))?,
            Err(error) => return Err(problem("cannot be used", &error)),
        }
        writable(dir).map_err(|e| problem("is not writable", &e))?;
        let root = fs::canonicalize(dir).map_err(|e| problem("cannot be resolved", &e))?;
        let mode = fs::metadata(&root)
            .map_err(|e| problem("cannot be used", &e))?
            .mode();
        let disk = Disk {
            sharing: Sharing::of_directory_mode(mode),
            fsync: config.fsync,
        };
        Ok(Self { config, root, disk })
    }

    /// The lock file of `name`: `<dir>/<namespace>/<encoded key>.lock`
    /// (with `dir` canonicalized).
    pub(crate) fn lock_path(&self, name: &LockName) -> PathBuf {
        names::lock_path(&self.root, name)
    }

    /// The holder of the lock file `path`: owner, token and value of the
    /// last acquisition recorded in the file while it is locked, `None`
    /// while it is free. Reads a record that raced a write again.
    pub(crate) async fn current_holder(&self, path: &Path) -> Result<Option<LockInfo>, LockError> {
        let give_up_at = Instant::now() + UNSETTLED_PATIENCE;
        loop {
            let holder = probe::holder(path, OnFree::Remove(self.disk))
                .map_err(|e| errors::io_error("cannot inspect lock file", path, e))?;
            match holder {
                Holder::Free => {
                    // Our shared lock may have turned away a waiter's attempt.
                    wakes().wake(&wake_key(path));
                    return Ok(None);
                }
                Holder::Held(record) => {
                    let record = record.unwrap_or(Record {
                        token: 0,
                        owner: None,
                        value: String::new(),
                    });
                    let owner = record.owner.unwrap_or_else(|| UNKNOWN_OWNER.to_owned());
                    let info = LockInfo::new(owner, FencingToken::new(record.token), None);
                    return Ok(Some(info.with_value(record.value)));
                }
                Holder::Unsettled if Instant::now() < give_up_at => {
                    tokio::time::sleep(UNSETTLED_PAUSE).await;
                }
                Holder::Unsettled => {
                    return Err(errors::io_error(
                        "cannot read the record of lock file",
                        path,
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            "its checksum does not match (the file is damaged)",
                        ),
                    ))
                }
            }
        }
    }
}
