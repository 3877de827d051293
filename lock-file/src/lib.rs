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
mod core;
mod counter;
mod create;
mod default_dir;
mod errors;
mod exclusive;
mod held;
mod lockfile;
mod names;
mod permits;
mod probe;
mod purge;
mod record;
mod shared;
mod wakes;
mod watch;

use std::sync::Arc;

use lock_core::backend::{Backend, Store};
use lock_core::url::{known_stores, StoreUrl};
use lock_core::LockError;

pub use backend::{FileBackend, POLL_CAP, POLL_INITIAL};
pub use config::{FileConfig, FILE_SCHEME};
pub use core::{DIR_MODE, UNKNOWN_OWNER};
pub use counter::BUCKETS;
pub use create::FILE_MODE;
pub use default_dir::{default_dir, fallback_dir, DefaultDir, PERSISTENT_DIR, SHARED_DIR_MODE};
pub use watch::{SETTLE, WATCH_POLL_INTERVAL};

/// The file store's plug-in: `file:///absolute/dir` URLs, read into a
/// [`FileConfig`] and opened as a [`FileBackend`].
#[derive(Clone, Copy, Debug)]
pub struct FileStore;

impl Store for FileStore {
    const NAME: &'static str = known_stores::FILE.name;
    const SCHEMES: &'static [&'static str] = known_stores::FILE.schemes;
    type Config = FileConfig;

    fn config(url: &mut StoreUrl) -> Result<FileConfig, LockError> {
        FileConfig::from_url(url)
    }

    async fn open(config: FileConfig) -> Result<Arc<dyn Backend>, LockError> {
        Ok(Arc::new(FileBackend::open(config)?))
    }
}
