//! The conformance suite against the file backend, opened by URL through
//! the `distlock` facade, on one temp directory shared by the cases.

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

/// Declares the suite as module `$module` on the file store `$factory`
/// makes. Locks live with the process that holds them (no lease runs
/// out) and there is no network to cut: the cases needing either are not
/// applicable.
macro_rules! file_conformance_tests {
    ($module:ident, $factory:ident) => {
        lock_core::conformance_tests!(
            $module,
            $factory,
            not_applicable: [
                abandoned_lock_is_freed_after_ttl,
                tokens_increase_across_expiry,
                watch_reports_expiry,
                stalled_leader_is_replaced_after_ttl,
                loss_is_signalled_before_others_can_acquire,
                lost_fires_for_read_locks_and_permits,
                vanished_permit_returns_after_ttl,
                unreachable_store_gives_unavailable_then_recovers,
                guard_dropped_while_unreachable_frees_the_lock_once_back,
            ]
        );
    };
}

file_conformance_tests!(file, file_factory);
file_conformance_tests!(file_fsync, file_fsync_factory);

/// flock(2) locks do not expire and cannot be broken, and other processes
/// are not notified: the cases needing those report themselves not
/// applicable. Read locks (`LOCK_SH`) and semaphores (slot files) it has.
/// This pins the flags so none flips unnoticed.
#[tokio::test]
async fn file_declares_its_capabilities() {
    let locker = distlock::connect(&file_url()).await.unwrap();
    let mut expected = Capabilities::default();
    expected.shared_locks = true;
    expected.semaphores = true;
    assert_eq!(locker.capabilities(), expected);
}
