//! What the tests of this crate share: lockers on a lock directory, and a
//! file store in a temporary directory of its own.

#![allow(dead_code)] // not every test binary uses everything

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{Locker, LockerOptions};
use lock_file::{FileBackend, FileConfig};
use tempfile::TempDir;

/// Opens the file store `config` describes; panics if it cannot.
pub(crate) fn open(config: FileConfig) -> FileBackend {
    FileBackend::open(config).expect("open the lock directory")
}

/// A locker, in the default namespace, on the lock directory `dir`.
pub(crate) fn locker(dir: &Path) -> Locker {
    Locker::new(
        Arc::new(open(FileConfig::new(dir))),
        LockerOptions::default(),
    )
}

/// A file store in a fresh temporary directory (removed with the value):
/// the backend, for finding a lock's file, and a locker on it.
pub(crate) struct TempStore {
    pub(crate) dir: TempDir,
    pub(crate) backend: FileBackend,
    pub(crate) locks: Locker,
}

impl TempStore {
    /// A store with the default configuration.
    pub(crate) fn new() -> Self {
        Self::with(|dir| FileConfig::new(dir))
    }

    /// A store whose held locks are checked every `interval`.
    pub(crate) fn checked_every(interval: Duration) -> Self {
        Self::with(|dir| FileConfig {
            check_interval: Some(interval),
            ..FileConfig::new(dir)
        })
    }

    /// A store configured by `config`, given the directory.
    pub(crate) fn with(config: impl FnOnce(&Path) -> FileConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let backend = open(config(dir.path()));
        let locks = Locker::new(Arc::new(backend.clone()), LockerOptions::default());
        Self {
            dir,
            backend,
            locks,
        }
    }

    /// The same store, its locker in namespace `namespace`.
    pub(crate) fn in_namespace(self, namespace: &str) -> Self {
        let locks = self.locks.with_namespace(namespace).unwrap();
        Self { locks, ..self }
    }

    /// Where the lock file of `key` (in the locker's namespace) is.
    pub(crate) fn lock_path(&self, key: &str) -> PathBuf {
        self.backend.lock_path(&self.locks.name(key).unwrap())
    }

    /// The lock file of `key`, its directory created.
    pub(crate) fn made_lock_path(&self, key: &str) -> PathBuf {
        let path = self.lock_path(key);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        path
    }
}
