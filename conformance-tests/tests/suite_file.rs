//! The conformance suite against the file backend, opened by URL through
//! the `distlock` facade, on one temp directory shared by the cases.

#[macro_use]
mod common;

use std::sync::OnceLock;

use distlock::conformance::{async_trait, CaseSettings, LockerFactory, UrlFactory};
use distlock::{LockError, Locker};
use lock_core::backend::Capabilities;
use lock_file::{FileBackend, FileConfig};

fn lock_dir() -> &'static tempfile::TempDir {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("temp dir"))
}

fn file_url() -> String {
    format!("file://{}", lock_dir().path().display())
}

/// Opens lockers by URL; takes a lock away the way an operator would, by
/// deleting its lock file.
struct FileFactory {
    urls: UrlFactory,
    files: FileBackend,
}

#[async_trait]
impl LockerFactory for FileFactory {
    async fn open(&self, settings: &CaseSettings) -> Result<Locker, LockError> {
        self.urls.open(settings).await
    }

    async fn take_away(&self, locker: &Locker, key: &str) -> Option<Result<(), LockError>> {
        let path = match locker.name(key) {
            Ok(name) => self.files.lock_path(&name),
            Err(error) => return Some(Err(error)),
        };
        Some(
            std::fs::remove_file(&path)
                .map_err(|e| LockError::backend(format!("cannot remove {}", path.display()), e)),
        )
    }
}

fn factory_for(url: &str) -> FileFactory {
    FileFactory {
        urls: UrlFactory::new(url).expect("valid URL"),
        files: FileBackend::open(FileConfig::new(lock_dir().path())).expect("lock dir"),
    }
}

async fn file_factory() -> FileFactory {
    factory_for(&file_url())
}

/// With `fsync=true` each acquisition syncs the token to disk on tokio's
/// blocking pool: a different code path, so it runs the whole suite too.
async fn file_fsync_factory() -> FileFactory {
    factory_for(&format!("{}?fsync=true", file_url()))
}

// Locks live with the process that holds them (no lease runs out) and
// there is no network to cut.
conformance_tests_lacking!(file, file_factory, [per_lock_expiry, leases, outages]);
conformance_tests_lacking!(
    file_fsync,
    file_fsync_factory,
    [per_lock_expiry, leases, outages]
);

/// flock(2) locks do not expire and cannot be broken, and other processes
/// are not notified: the cases needing those report themselves not
/// applicable. Read locks (`LOCK_SH`) and semaphores (slot files) it has.
/// A watch reads the file again on each inotify event, so quick changes
/// may be merged: no `watch_every_change`. This pins the flags so none
/// flips unnoticed.
#[tokio::test]
async fn file_declares_its_capabilities() {
    let locker = distlock::connect(&file_url()).await.unwrap();
    let mut expected = Capabilities::default();
    expected.shared_locks = true;
    expected.semaphores = true;
    expected.namespaced_keys = true;
    expected.stored_limits = true;
    assert_eq!(locker.capabilities(), expected);
}
