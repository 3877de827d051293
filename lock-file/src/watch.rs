//! [`FileWatch`]: the holder of one lock file, pushed by the file system's
//! notifications (inotify on Linux) on the lock file's directory.
//!
//! What tells a watch that the holder changed:
//!
//! * an acquisition creates the file and writes the record, a value change
//!   writes it: create and modify events;
//! * a release (or a dropped guard) removes the file while still holding
//!   it, then unlocks and closes it: a directory event (a read then finds
//!   no file: free), and a close-write event;
//! * a holder process that dies has its files closed by the kernel: a
//!   close-write event, but sent a moment *before* the kernel drops the
//!   flock. A read at once may still find the lock held, so after each
//!   event that leaves the lock held the watch reads again [`SETTLE`] later
//!   (1 ms, 10 ms, 100 ms, 1 s); the kernel drops the lock within that
//!   same close, so the first of these sees it free;
//! * creating, removing or renaming the file otherwise: a directory event.
//!
//! Where no native watcher can be had (`notify::recommended_watcher` or
//! its watch fails, e.g. past `fs.inotify.max_user_instances`), or on
//! systems whose native watcher reports no closes (every one but Linux and
//! Android), a dead holder changes nothing the watcher sees: there the
//! watch reads a held lock again every [`WATCH_POLL_INTERVAL`], and a dead
//! holder is seen within that. Without a native watcher, notify's
//! `PollWatcher` compares the directory's files every
//! [`WATCH_POLL_INTERVAL`] to notice acquisitions and releases.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{Change, HolderSource};
use lock_core::{LockError, LockInfo};
use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{Event, EventKind, RecursiveMode, Watcher};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::core::FileCore;

/// After an event that leaves the lock held, the watch reads it again
/// after each of these delays (counted from the read before), in case the
/// event was a dying holder's close that the kernel had not yet followed
/// with the unlock.
pub const SETTLE: [Duration; 4] = [
    Duration::from_millis(1),
    Duration::from_millis(10),
    Duration::from_millis(100),
    Duration::from_secs(1),
];

/// How long a watch waits for a new holder to write its record; see
/// [`FileWatch::read_announced`]. With `fsync` the acquirer syncs the
/// token counter and then the record before it is announced, which on a
/// busy disk takes far longer than the microseconds it takes otherwise.
const UNANNOUNCED_PATIENCE: Duration = Duration::from_secs(5);
/// The first pause between two reads while waiting for it; each pause
/// doubles, up to [`UNANNOUNCED_MAX_PAUSE`].
const UNANNOUNCED_PAUSE: Duration = Duration::from_millis(1);
/// The longest pause between two reads while waiting for it.
const UNANNOUNCED_MAX_PAUSE: Duration = Duration::from_millis(50);

/// Without native close notifications, how often a watch reads a held lock
/// again, and how often notify's `PollWatcher` compares the directory.
pub const WATCH_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The watch of one lock file; see the module docs.
pub(crate) struct FileWatch {
    core: FileCore,
    path: PathBuf,
    dir: PathBuf,
    signal: Arc<Signal>,
    /// Set up by the first read; dropping it stops its thread and closes
    /// its inotify descriptor.
    watcher: Option<Box<dyn Watcher + Send>>,
    /// Whether the watcher reports closes (releases) by itself.
    sees_closes: bool,
    /// Use notify's `PollWatcher` even where a native watcher exists.
    force_poll: bool,
    /// When to read again although nothing was reported.
    recheck: Option<Instant>,
    /// Whether the last read followed a close (or was the first, or
    /// followed an error), so that a held lock is read again after the
    /// [`SETTLE`] delays.
    settling: bool,
    /// Which [`SETTLE`] delay comes next.
    settle_step: usize,
    /// The token of the holder last reported, if held.
    current: Option<u64>,
    /// The highest token of a holder seen to go (0: none yet).
    gone: u64,
}

/// What the watcher's thread tells the stream.
#[derive(Debug, Default)]
struct Signal {
    changed: Notify,
    /// A file was closed after writing since the stream last woke.
    closed: AtomicBool,
    /// The watch must be set up again (the directory went, or the watcher
    /// failed).
    rearm: AtomicBool,
}

impl FileWatch {
    /// A watch of the lock file `path`; nothing is set up until the first
    /// read.
    pub(crate) fn new(core: FileCore, path: PathBuf) -> Self {
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self {
            core,
            path,
            dir,
            signal: Arc::default(),
            watcher: None,
            sees_closes: false,
            force_poll: false,
            recheck: None,
            settling: true,
            settle_step: 0,
            current: None,
            gone: 0,
        }
    }

    /// The same watch on notify's `PollWatcher`, as where no native watcher
    /// can be had.
    #[cfg(test)]
    pub(crate) fn polling(core: FileCore, path: PathBuf) -> Self {
        Self {
            force_poll: true,
            ..Self::new(core, path)
        }
    }

    /// Drops the old watcher, then watches the directory (created if
    /// missing, as the next acquisition would) with a native watcher, else
    /// with notify's `PollWatcher`.
    fn arm(&mut self) -> Result<(), LockError> {
        self.watcher = None;
        crate::create::create_dir(&self.dir, self.core.disk.sharing)
            .map_err(|e| self.io_error("cannot create", e))?;
        let handler = {
            let (signal, path, dir) = (self.signal.clone(), self.path.clone(), self.dir.clone());
            move |event: notify::Result<Event>| signal.on_event(&path, &dir, event)
        };
        if !self.force_poll {
            let native = notify::recommended_watcher(handler.clone()).and_then(|mut watcher| {
                watcher.watch(&self.dir, RecursiveMode::NonRecursive)?;
                Ok(watcher)
            });
            match native {
                Ok(watcher) => {
                    self.watcher = Some(Box::new(watcher));
                    self.sees_closes = cfg!(any(target_os = "linux", target_os = "android"));
                    return Ok(());
                }
                Err(error) => tracing::warn!(
                    dir = %self.dir.display(), %error,
                    "distlock: no native file watcher; polling the lock directory"
                ),
            }
        }
        let config = notify::Config::default()
            .with_poll_interval(WATCH_POLL_INTERVAL)
            .with_compare_contents(true);
        let mut watcher = notify::PollWatcher::new(handler, config)
            .map_err(|e| LockError::backend("cannot start a file watcher", e))?;
        watcher
            .watch(&self.dir, RecursiveMode::NonRecursive)
            .map_err(|e| LockError::backend("cannot watch the lock directory", e))?;
        self.watcher = Some(Box::new(watcher));
        self.sees_closes = false;
        Ok(())
    }

    /// The holder, once it has written its record. An acquirer takes the
    /// flock first and writes its record a moment later; a read in between
    /// finds the lock held and the record of the holder before (or none, in
    /// a new file), and would report a holder that is gone. So a held lock
    /// whose record is one we saw go (token 0, or not above the highest
    /// token seen going) is read again, after [`UNANNOUNCED_PAUSE`] and
    /// then ever longer pauses (up to [`UNANNOUNCED_MAX_PAUSE`]), so that
    /// the watch never reports a holder that is not there; after
    /// [`UNANNOUNCED_PATIENCE`] it is reported as it is (a program other
    /// than distlock holding the file, or a file created again, whose tokens
    /// restarted).
    async fn read_announced(&mut self) -> Result<Option<LockInfo>, LockError> {
        let give_up_at = Instant::now() + UNANNOUNCED_PATIENCE;
        let mut pause = UNANNOUNCED_PAUSE;
        loop {
            let holder = self.core.current_holder(&self.path).await?;
            let token = holder.as_ref().map(|info| info.token.get());
            let unannounced = token.filter(|t| *t == 0 || *t <= self.gone);
            if unannounced.is_some() && Instant::now() < give_up_at {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(UNANNOUNCED_MAX_PAUSE);
                continue;
            }
            if let Some(previous) = self.current.filter(|previous| token != Some(*previous)) {
                self.gone = self.gone.max(previous);
            }
            if let Some(token) = unannounced {
                // Reported as it is: count on from here.
                self.gone = token.saturating_sub(1);
            }
            self.current = token;
            return Ok(holder);
        }
    }

    /// After an event: settle if it was (or included) a close.
    fn woken(&mut self) {
        self.settling = self.signal.closed.swap(false, Ordering::SeqCst);
        self.settle_step = 0;
    }

    fn io_error(&self, what: &str, error: std::io::Error) -> LockError {
        crate::errors::io_error(what, &self.dir, error)
    }
}

impl Signal {
    /// Runs on the watcher's thread: wakes the stream for every event that
    /// may change the holder of `path` (in `dir`).
    fn on_event(&self, path: &Path, dir: &Path, event: notify::Result<Event>) {
        match event {
            Ok(event) => match relevance(&event, path, dir) {
                Relevance::None => return,
                Relevance::Holder => {}
                Relevance::Closed => self.closed.store(true, Ordering::SeqCst),
                Relevance::Rearm => self.rearm.store(true, Ordering::SeqCst),
            },
            Err(error) => {
                tracing::debug!(%error, "distlock: file watcher error; watching again");
                self.rearm.store(true, Ordering::SeqCst);
            }
        }
        self.changed.notify_one();
    }
}

/// What an event means for one lock file's watch.
#[derive(Debug, PartialEq, Eq)]
enum Relevance {
    /// Nothing (another file, or only an open or a read).
    None,
    /// The holder may have changed: read it.
    Holder,
    /// The file was closed after writing: a release, or a dying holder's
    /// close that comes a moment before the kernel drops its lock.
    Closed,
    /// The directory itself went (or events were lost): set the watch up
    /// again, then read.
    Rearm,
}

fn relevance(event: &Event, path: &Path, dir: &Path) -> Relevance {
    if event.need_rescan() || event.paths.is_empty() {
        return Relevance::Rearm;
    }
    let on_dir = event.paths.iter().any(|p| p == dir);
    if !on_dir && !event.paths.iter().any(|p| p == path) {
        return Relevance::None;
    }
    match event.kind {
        // Opens and reads (ours included) change nothing; a close after
        // writing may be a release.
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => Relevance::Closed,
        EventKind::Access(_) => Relevance::None,
        EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_)) if on_dir => Relevance::Rearm,
        _ => Relevance::Holder,
    }
}

#[async_trait]
impl HolderSource for FileWatch {
    async fn read(&mut self) -> Result<Option<LockInfo>, LockError> {
        let read = async {
            if self.watcher.is_none() || self.signal.rearm.swap(false, Ordering::SeqCst) {
                self.arm()?;
            }
            self.read_announced().await
        };
        let holder = match read.await {
            Ok(holder) => holder,
            Err(error) => {
                (self.settling, self.settle_step) = (true, 0);
                return Err(error);
            }
        };
        self.recheck = match holder {
            None => None,
            Some(_) if !self.sees_closes => Some(Instant::now() + WATCH_POLL_INTERVAL),
            Some(_) if self.settling => SETTLE
                .get(self.settle_step)
                .map(|delay| Instant::now() + *delay),
            Some(_) => None,
        };
        Ok(holder)
    }

    async fn next_change(&mut self) -> Result<Change, LockError> {
        let event = self.signal.changed.notified();
        match self.recheck {
            Some(at) => {
                tokio::select! {
                    () = event => self.woken(),
                    () = tokio::time::sleep_until(at) => self.settle_step += 1,
                }
            }
            None => {
                event.await;
                self.woken();
            }
        }
        Ok(Change::Reread)
    }
}

#[cfg(test)]
mod tests;
