//! The file store's floor: open (creating) + `flock(LOCK_EX|LOCK_NB)` +
//! unlock + close on a file of its own, run inline like the store's own
//! attempts; and its raw hand-off, a thread blocked in `flock(LOCK_EX)`.

use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use distlock::{LockError, LockName};
use lock_file::FileStore;

use super::{escape, taken, Floor, FloorProbe};

/// The floor's directory under the lock directory. A namespace cannot
/// contain `+`, so no real lock lives under it.
const FLOOR_DIR: &str = "bench+floor";

/// The floor of a `file://` URL.
pub(super) fn open(url: &str) -> Result<Floor, LockError> {
    let dir = lock_core::open::parse::<FileStore>(url)?.config.dir;
    Ok(Box::new(FileFloor {
        dir: dir.join(FLOOR_DIR),
    }))
}

/// Locks and unlocks one file per lock name, under [`FLOOR_DIR`].
#[derive(Debug)]
struct FileFloor {
    dir: PathBuf,
}

impl FileFloor {
    /// `<floor dir>/<namespace>/<escaped key>.lock`.
    fn path(&self, name: &LockName) -> PathBuf {
        self.dir
            .join(name.namespace().as_str())
            .join(format!("{}.lock", escape(name.key().as_str())))
    }
}

#[async_trait::async_trait]
impl FloorProbe for FileFloor {
    fn describe(&self) -> String {
        "open + flock + unlock + close".to_owned()
    }

    /// Removes the namespace's floor files, and the floor's directory
    /// once no run uses it.
    async fn clean_up(&self, namespace: &str) -> Result<(), LockError> {
        match fs::remove_dir_all(self.dir.join(namespace)) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(LockError::backend(
                    format!("cannot remove the floor files of {namespace}: {error}"),
                    error,
                ))
            }
        }
        // Fails while another run's files are there: that run removes it.
        let _ = fs::remove_dir(&self.dir);
        Ok(())
    }

    async fn lock_release_once(&self, name: &LockName) -> Result<(), LockError> {
        let path = self.path(name);
        match lock_unlock_once(&path) {
            Ok(true) => Ok(()),
            Ok(false) => Err(taken(format_args!("`{}`", path.display()))),
            Err(error) => Err(LockError::backend(
                format!("floor probe cannot lock `{}`: {error}", path.display()),
                error,
            )),
        }
    }

    fn describe_round_trip(&self) -> String {
        "stat".to_owned()
    }

    fn describe_handoff(&self) -> Option<String> {
        Some("flock(LOCK_UN) -> a thread blocked in flock(LOCK_EX) returns".to_owned())
    }

    async fn handoff_once(&self, name: &LockName) -> Result<Option<Duration>, LockError> {
        let path = self.path(name).with_extension("handoff");
        let handed = tokio::task::spawn_blocking(move || handoff(&path))
            .await
            .map_err(|e| LockError::backend("the hand-off floor's thread failed", e))?;
        handed.map(Some).map_err(|error| {
            LockError::backend(format!("floor probe cannot hand off: {error}"), error)
        })
    }

    async fn round_trip_once(&self, name: &LockName) -> Result<(), LockError> {
        let path = self.path(name);
        match fs::metadata(&path) {
            // A file not made yet answers the same one system call.
            Err(error) if error.kind() != io::ErrorKind::NotFound => Err(LockError::backend(
                format!("floor probe cannot stat `{}`: {error}", path.display()),
                error,
            )),
            _ => Ok(()),
        }
    }
}

/// How long the holder keeps the lock after the waiter's thread started,
/// so that the waiter is blocked in `flock` when it is released.
const WAITER_BLOCKS: Duration = Duration::from_millis(5);

/// One raw hand-off on `path`: this thread holds the file, a second one
/// blocks in `flock(LOCK_EX)`; from this thread's unlock to the second's
/// `flock` returning.
fn handoff(path: &Path) -> io::Result<Duration> {
    let holder = open_creating(path)?;
    if !flock(&holder, libc::LOCK_EX | libc::LOCK_NB)? {
        return Err(io::Error::other("the hand-off floor's file was taken"));
    }
    let waiter_file = open_creating(path)?;
    let waiter = std::thread::spawn(move || {
        flock(&waiter_file, libc::LOCK_EX)?;
        let held_at = Instant::now();
        flock(&waiter_file, libc::LOCK_UN)?;
        Ok::<_, io::Error>(held_at)
    });
    std::thread::sleep(WAITER_BLOCKS);
    let released_at = Instant::now();
    flock(&holder, libc::LOCK_UN)?;
    let held_at = waiter
        .join()
        .map_err(|_| io::Error::other("the hand-off floor's waiter panicked"))??;
    Ok(held_at.saturating_duration_since(released_at))
}

/// Opens `path` for writing, creating it and its directory if missing.
fn open_creating(path: &Path) -> io::Result<File> {
    let mut create = File::options();
    create.write(true).create(true).truncate(false);
    match create.open(path) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(path.parent().expect("a floor file lies in a directory"))?;
            create.open(path)
        }
        opened => opened,
    }
}

/// Open (creating it and its directory the first time), lock, unlock,
/// close; `false` if someone else has the file locked.
fn lock_unlock_once(path: &Path) -> io::Result<bool> {
    let file = open_creating(path)?;
    let locked = flock(&file, libc::LOCK_EX | libc::LOCK_NB)?;
    if locked {
        flock(&file, libc::LOCK_UN)?;
    }
    Ok(locked)
}

/// `flock(2)` on `file`; `false` where a `LOCK_NB` request finds the lock
/// held through another open file description. A blocking request
/// interrupted by a signal is made again.
fn flock(file: &File, operation: libc::c_int) -> io::Result<bool> {
    loop {
        // SAFETY: the descriptor is open for as long as `file` lives.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Ok(true);
        }
        let error = io::Error::last_os_error();
        match error.kind() {
            io::ErrorKind::WouldBlock => return Ok(false),
            io::ErrorKind::Interrupted => {}
            _ => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floor(dir: &Path) -> FileFloor {
        FileFloor {
            dir: dir.join(FLOOR_DIR),
        }
    }

    #[tokio::test]
    async fn the_floor_locks_and_unlocks_its_file_and_fails_while_another_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let floor = floor(dir.path());
        let name = LockName::parse("ns", "jobs/nightly").unwrap();
        floor.lock_release_once(&name).await.unwrap();
        let path = floor.path(&name);
        assert!(path.starts_with(dir.path().join(FLOOR_DIR)), "{path:?}");
        assert!(path.is_file(), "{path:?}");

        // Someone else's open file description holds the lock.
        let other = File::open(&path).unwrap();
        assert!(flock(&other, libc::LOCK_EX | libc::LOCK_NB).unwrap());
        let error = floor.lock_release_once(&name).await.unwrap_err();
        assert!(
            error.is_timeout(),
            "a held raw lock is a busy attempt: {error}"
        );
        drop(other);
        floor.lock_release_once(&name).await.unwrap();
        // Unlocked again: anybody can take it.
        let after = File::open(&path).unwrap();
        assert!(flock(&after, libc::LOCK_EX | libc::LOCK_NB).unwrap());
    }

    #[tokio::test]
    async fn open_reads_the_lock_directory_from_the_url() {
        let dir = tempfile::tempdir().unwrap();
        let url = ::url::Url::from_directory_path(dir.path()).unwrap();
        let probe = super::super::open(url.as_str()).await.unwrap().unwrap();
        assert_eq!(probe.describe(), "open + flock + unlock + close");
        assert_eq!(probe.describe_round_trip(), "stat");
        let name = LockName::parse("ns", "k").unwrap();
        probe.round_trip_once(&name).await.unwrap();
        probe.lock_release_once(&name).await.unwrap();
        probe.round_trip_once(&name).await.unwrap();
        let handed = probe
            .handoff_once(&name)
            .await
            .unwrap()
            .expect("a hand-off");
        assert!(handed < Duration::from_secs(5), "{handed:?}");
        assert!(probe.describe_handoff().is_some());
        assert!(dir
            .path()
            .join(FLOOR_DIR)
            .join("ns")
            .join("k.lock")
            .is_file());
    }

    #[test]
    fn no_namespace_can_be_the_floor_directory() {
        assert!(LockName::parse(FLOOR_DIR, "k").is_err());
    }
}
