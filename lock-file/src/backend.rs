//! [`FileBackend`]: the [`Backend`] implementation over `flock(2)`.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lock_core::backend::Capability::{NamespacedKeys, Semaphores, SharedLocks, StoredLimits};
use lock_core::backend::{
    acquire_with_retries, holder_stream, AcquireRequest, Acquired, Attempt, Backend, Backoff,
    Capabilities, HolderStream, Primitive, Renewal, TryAcquire, WakeSubscription,
};
use lock_core::{FencingToken, HoldKind, LockError, LockInfo, LockName, Namespace};

use crate::attempt::{attempt, Taken};
use crate::config::{FileConfig, FILE_SCHEME};
use crate::core::{FileCore, UNKNOWN_OWNER};
use crate::errors;
use crate::held::FileHeld;
use crate::permits;
use crate::probe;
use crate::purge;
use crate::shared::{self, WriterWaiting};
use crate::wakes::{wake_key, wakes};
use crate::watch::FileWatch;

/// First wait of the polling fallback.
pub const POLL_INITIAL: Duration = Duration::from_millis(1);
/// Longest wait of the polling fallback.
pub const POLL_CAP: Duration = Duration::from_millis(50);

/// Lock files in one directory; see the [crate docs](crate).
///
/// Cheap to clone. Every `FileBackend` of a process shares one wake-up
/// registry, so a release wakes this process's waiters at once, whichever
/// backend instance they wait through.
#[derive(Clone)]
pub struct FileBackend {
    core: FileCore,
}

impl FileBackend {
    /// Opens the lock directory `config.dir`, creating it (and missing
    /// parents) with mode `0o700` if it does not exist; an existing
    /// directory keeps its mode. Where others may write to the directory
    /// (`o+w`, or `g+w`), everything created in it is made usable by them
    /// too (see the crate docs, *Sharing a directory between users*).
    /// Fails naming the path and the problem: with
    /// [`LockError::PermissionDenied`] when this user may not create or
    /// write it (saying who owns it), with [`LockError::InvalidConfig`]
    /// when it is not a directory or cannot be used otherwise.
    pub fn open(config: FileConfig) -> Result<Self, LockError> {
        Ok(Self {
            core: FileCore::open(config)?,
        })
    }

    /// The settings this backend was opened with.
    pub fn config(&self) -> &FileConfig {
        &self.core.config
    }

    /// The lock file of `name`: `<dir>/<namespace>/<encoded key>.lock`
    /// (with `dir` canonicalized). See the crate docs for the encoding.
    pub fn lock_path(&self, name: &LockName) -> PathBuf {
        self.core.lock_path(name)
    }
}

#[async_trait]
impl Backend for FileBackend {
    fn name(&self) -> &'static str {
        FILE_SCHEME
    }

    /// Shared locks and semaphores, nothing else: locks never expire (a
    /// dead process's locks are freed by the kernel at once, a live
    /// holder's never), flock cannot be broken, waiters in other processes
    /// poll, no order among waiters, no network.
    fn capabilities(&self) -> Capabilities {
        Capabilities::of(&[NamespacedKeys, SharedLocks, Semaphores, StoredLimits])
    }

    /// An exclusive request that finds the lock taken marks the gate
    /// while it waits, so readers asking after it wait behind it (see
    /// the crate docs, *Read-write locks*).
    async fn acquire(&self, request: &AcquireRequest) -> Result<Option<Acquired>, LockError> {
        if request.kind != HoldKind::Exclusive || !request.wait.may_wait() {
            return acquire_with_retries(self, request).await;
        }
        if let Attempt::Acquired(acquired) = self.try_acquire_once(request).await? {
            return Ok(Some(acquired));
        }
        let path = self.lock_path(&request.name);
        let _waiting = loop {
            match WriterWaiting::try_mark(&path, self.core.disk) {
                Ok(Some(mark)) => break mark,
                // A reader is stamping its token, for microseconds.
                Ok(None) => tokio::time::sleep(POLL_INITIAL).await,
                Err(e) => return Err(errors::io_error("cannot mark the gate of", &path, e)),
            }
        };
        acquire_with_retries(self, request).await
    }

    /// Held → owner, token and value of the last distlock acquisition
    /// recorded in the file (`ttl_left: None`: locks do not expire). Briefly
    /// takes a shared lock to find out.
    async fn inspect(&self, name: &LockName) -> Result<Option<LockInfo>, LockError> {
        self.core.current_holder(&self.lock_path(name)).await
    }

    /// The lock's exclusive holder from its record, or its readers from
    /// their own files; a semaphore's permits from their slots.
    async fn holders(
        &self,
        name: &LockName,
        primitive: Primitive,
    ) -> Result<Vec<LockInfo>, LockError> {
        let path = self.lock_path(name);
        let listed = match primitive {
            Primitive::Semaphore => permits::holders(&path)
                .map(|(records, limit)| (records, HoldKind::Permit { limit })),
            Primitive::Lock => match probe::held_exclusively(&path, self.core.disk) {
                Ok(true) => {
                    return Ok(self.core.current_holder(&path).await?.into_iter().collect());
                }
                Ok(false) => shared::readers(&path).map(|records| (records, HoldKind::Shared)),
                Err(error) => Err(error),
            },
        };
        let (records, kind) =
            listed.map_err(|e| errors::io_error("cannot list the holders of", &path, e))?;
        Ok(records
            .into_iter()
            .map(|record| {
                let owner = record.owner.unwrap_or_else(|| UNKNOWN_OWNER.to_owned());
                LockInfo::new(owner, FencingToken::new(record.token), None)
                    .with_value(record.value)
                    .with_kind(kind)
            })
            .collect())
    }

    /// Pushed by file system notifications on the lock file's directory;
    /// see the crate docs (*Watching*).
    fn watch(&self, name: &LockName) -> HolderStream {
        holder_stream(FileWatch::new(self.core.clone(), self.lock_path(name)))
    }

    /// Renames the namespace's directory out of the way, then removes it
    /// (see the crate docs, *Purging a namespace*). Holders in it report
    /// their locks lost (`TakenAway`) at their next check.
    async fn purge_namespace(&self, namespace: &Namespace) -> Result<(), LockError> {
        let (root, name) = (self.core.root.clone(), namespace.as_str().to_owned());
        let dir = self.core.root.join(namespace.as_str());
        tokio::task::spawn_blocking(move || purge::purge(&root, &name))
            .await
            .map_err(|e| LockError::backend("the purge task failed", e))?
            .map_err(|e| errors::io_error("cannot remove namespace directory", &dir, e))
    }
}

#[async_trait]
impl TryAcquire for FileBackend {
    async fn watch_releases(&self, name: &LockName) -> Result<WakeSubscription, LockError> {
        Ok(wakes().subscribe(&wake_key(&self.lock_path(name))))
    }

    /// One attempt: for a lock, `open` + `flock(LOCK_EX|LOCK_NB)` + the
    /// standing check + a token drawn from the name's counter + the record
    /// written. Without `fsync` it runs
    /// inline with no await point, so it is never interrupted half-way;
    /// with `fsync` it runs on the blocking pool, and if the caller goes
    /// away the result (the locked files) is dropped, which unlocks them.
    async fn try_acquire_once(&self, request: &AcquireRequest) -> Result<Attempt, LockError> {
        let requested_at = Instant::now();
        let path = self.lock_path(&request.name);
        let kind = request.kind;
        let attempted = if self.core.config.fsync {
            let (path, owner, value) = (path.clone(), request.owner.clone(), request.value.clone());
            // A blocking task runs to its end even when its caller is gone;
            // one that only starts after the caller gave up (the pool was
            // busy) must not take the lock, not even for an instant.
            let caller = CallerAlive::new();
            let alive = caller.flag();
            let disk = self.core.disk;
            tokio::task::spawn_blocking(move || {
                if !alive.load(Ordering::SeqCst) {
                    return Ok(Taken::Busy);
                }
                attempt(&path, kind, owner.as_str(), &value, disk)
            })
            .await
            .map_err(|e| LockError::backend("the lock attempt task failed", e))?
        } else {
            attempt(
                &path,
                kind,
                request.owner.as_str(),
                &request.value,
                self.core.disk,
            )
        };
        match attempted.map_err(|e| errors::io_error("cannot lock", &path, e))? {
            Taken::Busy => {
                tracing::debug!(path = %path.display(), kind = kind.as_str(), "distlock: busy");
                Ok(Attempt::Held { retry_after: None })
            }
            Taken::Mismatch { stored } => Err(LockError::LimitMismatch {
                key: request.name.key().to_string(),
                stored,
                asked: match kind {
                    HoldKind::Permit { limit } => limit,
                    _ => 0,
                },
            }),
            Taken::Held(hold, token) => {
                let held_path = hold
                    .locked()
                    .map_or_else(|| path.clone(), |l| l.path().to_owned());
                tracing::debug!(path = %held_path.display(), token, "distlock: locked");
                Ok(Attempt::Acquired(Acquired {
                    token: FencingToken::new(token),
                    requested_at,
                    renewal: Renewal::Check {
                        interval: self.core.config.check_interval_for(request.ttl),
                    },
                    held: Box::new(FileHeld {
                        path: held_path,
                        key: request.name.key().to_string(),
                        owner: request.owner.clone(),
                        token,
                        hold: Mutex::new(Some(hold)),
                        wake: wake_key(&path),
                    }),
                }))
            }
        }
    }

    /// Releases in this process wake waiters at once; other processes'
    /// releases are noticed by polling: exponential backoff from
    /// [`POLL_INITIAL`] to [`POLL_CAP`], with jitter.
    fn poll_policy(&self) -> Backoff {
        Backoff::exponential(POLL_INITIAL, POLL_CAP).with_jitter()
    }
}

impl fmt::Debug for FileBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileBackend")
            .field("config", &self.core.config)
            .field("root", &self.core.root)
            .field("disk", &self.core.disk)
            .finish()
    }
}

/// True while the call that started a blocking attempt still waits for it;
/// false once that call's future is dropped.
struct CallerAlive(Arc<AtomicBool>);

impl CallerAlive {
    fn new() -> Self {
        Self(Arc::new(AtomicBool::new(true)))
    }

    fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0)
    }
}

impl Drop for CallerAlive {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_directory_maps_to_the_same_lock_files() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        let link = dir.path().join("link");
        let straight = FileBackend::open(FileConfig::new(&real)).unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let winding = FileBackend::open(FileConfig::new(link.join("."))).unwrap();
        let name = LockName::parse("ns", "k").unwrap();
        // Same path, so the same wake-up key for both backends.
        assert_eq!(straight.lock_path(&name), winding.lock_path(&name));
    }

    #[test]
    fn poll_policy_starts_at_a_millisecond_and_stays_under_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let backend = FileBackend::open(FileConfig::new(dir.path())).unwrap();
        let delays: Vec<_> = backend.poll_policy().delays().take(20).collect();
        assert!(delays[0] <= POLL_INITIAL);
        assert!(delays.iter().all(|d| *d <= POLL_CAP));
        assert!(delays[19] >= POLL_CAP / 2);
    }
}
