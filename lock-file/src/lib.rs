#![doc = include_str!("../README.md")]
//!
//! ## Cargo features
//!
//! None: everything the file store does is always built.
#![deny(missing_docs)]

#[cfg(not(unix))]
compile_error!("lock-file needs a Unix system: it is built on flock(2)");

mod attempt;
mod backend;
mod config;
mod errors;
mod held;
mod lockfile;
mod names;
mod permits;
mod record;
mod shared;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lock_core::backend::{Backend, Store};
use lock_core::url::StoreUrl;
use lock_core::LockError;

pub use backend::{FileBackend, DIR_MODE, POLL_CAP, POLL_INITIAL, UNKNOWN_OWNER};
pub use config::{FileConfig, FILE_SCHEME};
pub use lockfile::FILE_MODE;
pub use watch::{SETTLE, WATCH_POLL_INTERVAL};

/// The file store's plug-in: `file:///absolute/dir` URLs, read into a
/// [`FileConfig`] and opened as a [`FileBackend`].
#[derive(Clone, Copy, Debug)]
pub struct FileStore;

impl Store for FileStore {
    const NAME: &'static str = "file";
    const SCHEMES: &'static [&'static str] = &[FILE_SCHEME];
    type Config = FileConfig;

    fn config(url: &mut StoreUrl) -> Result<FileConfig, LockError> {
        FileConfig::from_url(url)
    }

    async fn open(config: FileConfig) -> Result<Arc<dyn Backend>, LockError> {
        Ok(Arc::new(FileBackend::open(config)?))
    }
}

/// The embedded default lock directory: `$XDG_RUNTIME_DIR/distlock` if
/// `XDG_RUNTIME_DIR` is set to an absolute path, else
/// `<std::env::temp_dir()>/distlock-<uid>` (with the effective user id).
///
/// Both are per user; neither survives a reboot on a typical system, and
/// with them the fencing tokens restart (see the crate docs).
pub fn default_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if Path::new(&dir).is_absolute() => Path::new(&dir).join("distlock"),
        _ => {
            // SAFETY: geteuid has no preconditions and cannot fail.
            let uid = unsafe { libc::geteuid() };
            std::env::temp_dir().join(format!("distlock-{uid}"))
        }
    }
}
