//! [`FileHeld`]: one lock file we hold, renewed by checking and released
//! by unlocking.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::HeldLock;
use lock_core::{LockError, LossReason, OwnerId};

use crate::backend::wakes;
use crate::lockfile::LockedFile;
use crate::shared::ReaderFile;

/// A held lock: the locked file, until released or dropped.
#[derive(Debug)]
pub(crate) struct FileHeld {
    /// The lock file's path.
    pub(crate) path: PathBuf,
    /// The key as shown in errors.
    pub(crate) key: String,
    /// Our owner id and token, as recorded in the file.
    pub(crate) owner: OwnerId,
    pub(crate) token: u64,
    /// `None` once released.
    pub(crate) file: Mutex<Option<LockedFile>>,
    /// A reader's own file (read locks only); removed on release.
    pub(crate) reader: Mutex<Option<ReaderFile>>,
    /// The wake-up key of the waiters this hold's release lets in.
    pub(crate) wake: String,
}

impl FileHeld {
    fn file(&self) -> MutexGuard<'_, Option<LockedFile>> {
        self.file.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lost(&self, reason: LossReason) -> LockError {
        LockError::lost(self.key.clone(), reason)
    }

    /// Unlocks and closes the file, then wakes this process's waiters.
    /// Before unlocking, reports whether the file still stood.
    fn unlock(&self) -> Option<std::io::Result<bool>> {
        let locked = self.file().take()?;
        let stood = locked.still_stands(&self.path);
        drop(self.reader().take());
        drop(locked);
        wakes().wake(&self.wake);
        Some(stood)
    }

    fn reader(&self) -> MutexGuard<'_, Option<ReaderFile>> {
        self.reader.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for FileHeld {
    /// Releases synchronously (unlock + close), so a guard dropped outside
    /// any runtime still frees its lock at once.
    fn drop(&mut self) {
        self.unlock();
    }
}

#[async_trait]
impl HeldLock for FileHeld {
    /// Checks that the lock file still stands: the path still names the
    /// inode we locked. Removed or replaced → `Lost(TakenAway)`.
    async fn renew(&self, _ttl: Duration) -> Result<(), LockError> {
        let file = self.file();
        let Some(locked) = file.as_ref() else {
            return Err(self.lost(LossReason::RenewalRefused));
        };
        match locked.still_stands(&self.path) {
            Ok(true) => Ok(()),
            Ok(false) => Err(self.lost(LossReason::TakenAway)),
            Err(error) => Err(crate::errors::io_error(
                "cannot check lock file",
                &self.path,
                error,
            )),
        }
    }

    /// Unlocks and closes. Reports `Lost(TakenAway)` if the file had been
    /// removed or replaced meanwhile (our descriptor is unlocked anyway; the
    /// new file, possibly someone else's lock, is not touched).
    async fn release(&self) -> Result<(), LockError> {
        match self.unlock() {
            None => Err(self.lost(LossReason::RenewalRefused)),
            Some(Ok(true)) => Ok(()),
            Some(Ok(false)) => Err(self.lost(LossReason::TakenAway)),
            Some(Err(error)) => {
                // The lock is released either way; only the check failed.
                tracing::warn!(path = %self.path.display(), %error, "distlock: released, but could not check the lock file still stood");
                Ok(())
            }
        }
    }

    /// Rewrites the record with the new value (same token and owner), while
    /// we hold the flock: one positioned write, which watchers are told of
    /// by the file system. The file removed or replaced → `Lost(TakenAway)`,
    /// nothing written.
    async fn set_value(&self, value: &str) -> Result<(), LockError> {
        let mut file = self.file();
        let Some(locked) = file.as_mut() else {
            return Err(self.lost(LossReason::RenewalRefused));
        };
        let io_error = |what: &str, error| crate::errors::io_error(what, &self.path, error);
        match locked.still_stands(&self.path) {
            Ok(true) => {}
            Ok(false) => return Err(self.lost(LossReason::TakenAway)),
            Err(error) => return Err(io_error("cannot check lock file", error)),
        }
        // A reader's value lives in its own file: the lock file's record
        // is the last stamper's, which another reader may have been.
        let written = match self.reader().as_mut() {
            Some(reader) => reader.set_value(self.token, self.owner.as_str(), value),
            None => locked.write_record(self.token, self.owner.as_str(), value),
        };
        written.map_err(|error| io_error("cannot write the value to lock file", error))
    }
}
