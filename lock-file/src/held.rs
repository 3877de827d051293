//! [`FileHeld`]: one hold on a name's files, renewed by checking and
//! released by letting go (which removes the files once the name is free).

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::HeldLock;
use lock_core::{LockError, LossReason, OwnerId};

use crate::attempt::Hold;
use crate::wakes::wakes;

/// A held lock, read lock or permit, until released or dropped.
#[derive(Debug)]
pub(crate) struct FileHeld {
    /// The locked file's path: the lock file, or a permit's slot.
    pub(crate) path: PathBuf,
    /// The key as shown in errors.
    pub(crate) key: String,
    /// Our owner id and token, as recorded in the file.
    pub(crate) owner: OwnerId,
    pub(crate) token: u64,
    /// `None` once released.
    pub(crate) hold: Mutex<Option<Hold>>,
    /// The wake-up key of the waiters this hold's release lets in.
    pub(crate) wake: String,
}

impl FileHeld {
    fn hold(&self) -> MutexGuard<'_, Option<Hold>> {
        self.hold.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lost(&self, reason: LossReason) -> LockError {
        LockError::lost(self.key.clone(), reason)
    }

    fn io_error(&self, what: &str, error: std::io::Error) -> LockError {
        crate::errors::io_error(what, &self.path, error)
    }

    /// Lets go of the hold (removing the name's files if that frees the
    /// name), then wakes this process's waiters. Reports whether the hold
    /// still stood.
    fn unlock(&self) -> Option<std::io::Result<bool>> {
        let hold = self.hold().take()?;
        let stood = hold.release();
        wakes().wake(&self.wake);
        Some(stood)
    }

    /// Whether our file still stands: `Lost(TakenAway)` if it was removed
    /// or replaced, `Lost(RenewalRefused)` once released.
    fn check(&self, hold: Option<&Hold>) -> Result<(), LockError> {
        let Some(locked) = hold.and_then(Hold::locked) else {
            return Err(self.lost(LossReason::RenewalRefused));
        };
        match locked.still_stands() {
            Ok(true) => Ok(()),
            Ok(false) => Err(self.lost(LossReason::TakenAway)),
            Err(error) => Err(self.io_error("cannot check lock file", error)),
        }
    }
}

impl Drop for FileHeld {
    /// Releases synchronously, so a guard dropped outside any runtime
    /// still frees its lock at once.
    fn drop(&mut self) {
        self.unlock();
    }
}

#[async_trait]
impl HeldLock for FileHeld {
    /// Checks that our file still stands: the path still names the inode
    /// we locked. Removed or replaced → `Lost(TakenAway)`.
    async fn renew(&self, _ttl: Duration) -> Result<(), LockError> {
        self.check(self.hold().as_ref())
    }

    /// Lets go. Reports `Lost(TakenAway)` if the file had been removed or
    /// replaced meanwhile (our descriptor is unlocked anyway; the new
    /// file, possibly someone else's lock, is not touched).
    async fn release(&self) -> Result<(), LockError> {
        match self.unlock() {
            None => Err(self.lost(LossReason::RenewalRefused)),
            Some(Ok(true)) => Ok(()),
            Some(Ok(false)) => Err(self.lost(LossReason::TakenAway)),
            Some(Err(error)) => {
                // The lock is released either way; only the check or the
                // tidying failed.
                tracing::warn!(path = %self.path.display(), %error, "distlock: released, but could not check or remove the lock's files");
                Ok(())
            }
        }
    }

    /// Rewrites the record with the new value (same token and owner), while
    /// we hold the flock: one positioned write, which watchers are told of
    /// by the file system. The file removed or replaced → `Lost(TakenAway)`,
    /// nothing written.
    async fn set_value(&self, value: &str) -> Result<(), LockError> {
        let mut hold = self.hold();
        self.check(hold.as_ref())?;
        let Some(hold) = hold.as_mut() else {
            return Err(self.lost(LossReason::RenewalRefused));
        };
        hold.set_value(self.token, self.owner.as_str(), value)
            .map_err(|error| self.io_error("cannot write the value to lock file", error))
    }
}
