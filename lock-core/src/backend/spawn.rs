//! Running clean-up work in the background without blocking or panicking.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

type CleanupFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// How long lock-core waits, after a caller's deadline dropped its
/// acquisition, for the clean-ups that acquisition started; a store that
/// does not answer within it finishes them in the background.
pub const ABANDONED_CLEANUP_GRACE: Duration = Duration::from_secs(1);

tokio::task_local! {
    /// The clean-ups started by the acquisition being polled (or dropped).
    static ACQUISITION_CLEANUPS: AcquisitionCleanups;
}

/// The clean-ups an acquisition started through [`spawn_cleanup`] or
/// [`CleanupOnDrop`], so that the caller giving up on it can wait for them:
/// a wait that runs out then reports so only once its queue entry is gone,
/// and a hand-over right after cannot pass the lock to the abandoned entry.
#[derive(Clone, Default)]
pub(crate) struct AcquisitionCleanups {
    started: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl AcquisitionCleanups {
    /// Runs `acquisition` (polls and drop) with its clean-ups collected here.
    pub(crate) fn collecting<F: Future>(&self, acquisition: F) -> impl Future<Output = F::Output> {
        ACQUISITION_CLEANUPS.scope(self.clone(), acquisition)
    }

    /// Waits until every clean-up collected so far has finished, or for
    /// `at_most` (then the rest go on in the background). True if all
    /// finished.
    pub(crate) async fn finished(&self, at_most: Duration) -> bool {
        let started = std::mem::take(&mut *self.lock());
        let all = async {
            for cleanup in started {
                let _ = cleanup.await;
            }
        };
        tokio::time::timeout(at_most, all).await.is_ok()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<JoinHandle<()>>> {
        self.started.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Runs `work` on the current tokio runtime, or on `fallback` when called
/// outside one. With no runtime left at all, `work` is dropped unpolled:
/// whatever it owns is dropped synchronously, and a lock it meant to release
/// is left to expire. Never blocks, never panics.
pub fn spawn_detached<F>(fallback: Option<&Handle>, work: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    drop(spawn_on_a_runtime(fallback, work));
}

/// Spawns `work` on the current runtime, or on `fallback`; drops it
/// unpolled when there is neither. A runtime that is shutting down drops
/// the task instead of running it; that is the best anyone can do then.
fn spawn_on_a_runtime<F>(fallback: Option<&Handle>, work: F) -> Option<JoinHandle<()>>
where
    F: Future<Output = ()> + Send + 'static,
{
    let handle = Handle::try_current().ok().or_else(|| fallback.cloned())?;
    Some(handle.spawn(work))
}

/// Runs `work`, the clean-up of an acquisition that will not hold (its
/// queue entry, a hold its unanswered attempt may have taken), as
/// [`spawn_detached`] does; when started inside a call to
/// [`Backend::acquire`](super::Backend::acquire), that call's caller waits
/// for it (bounded) before reporting that the wait ran out.
pub fn spawn_cleanup<F>(fallback: Option<&Handle>, work: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    if let Some(task) = spawn_on_a_runtime(fallback, work) {
        // Outside an acquisition the task simply runs detached.
        let _ = ACQUISITION_CLEANUPS.try_with(|cleanups| cleanups.lock().push(task));
    }
}

/// Runs an async clean-up when dropped, unless [disarmed](Self::disarm),
/// through [`spawn_cleanup`].
///
/// Backends put one around the store-side state an acquire creates (a queue
/// entry, a key whose reply may be lost) so that a cancelled acquire
/// removes it. The clean-up's future is built only when it is needed (on a
/// drop while armed): arming costs one small allocation for the closure and
/// what it captures, which matters on paths that arm and disarm on every
/// acquisition.
pub struct CleanupOnDrop {
    make: Option<MakeCleanup>,
    fallback: Option<Handle>,
}

type MakeCleanup = Box<dyn FnOnce() -> CleanupFuture + Send + 'static>;

impl CleanupOnDrop {
    /// Arms the clean-up `make` builds, to run in the background on drop.
    pub fn new<M, F>(make: M) -> Self
    where
        M: FnOnce() -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        Self {
            make: Some(Box::new(move || Box::pin(make()) as CleanupFuture)),
            fallback: Handle::try_current().ok(),
        }
    }

    /// Cancels the clean-up: the state it guarded is now owned elsewhere.
    pub fn disarm(mut self) {
        self.make = None;
    }
}

impl Drop for CleanupOnDrop {
    fn drop(&mut self) {
        if let Some(make) = self.make.take() {
            spawn_cleanup(self.fallback.as_ref(), make());
        }
    }
}

impl fmt::Debug for CleanupOnDrop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CleanupOnDrop")
            .field("armed", &self.make.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn armed_cleanup_runs_disarmed_does_not() {
        let ran = Arc::new(AtomicBool::new(false));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let flag = ran.clone();
        drop(CleanupOnDrop::new(move || async move {
            flag.store(true, Ordering::SeqCst);
            let _ = tx.send(());
        }));
        rx.await.unwrap();
        assert!(ran.load(Ordering::SeqCst));

        let never = Arc::new(AtomicBool::new(false));
        let flag = never.clone();
        CleanupOnDrop::new(move || async move { flag.store(true, Ordering::SeqCst) }).disarm();
        tokio::task::yield_now().await;
        assert!(!never.load(Ordering::SeqCst));
    }

    /// An acquisition dropped at its deadline: the clean-up it armed is
    /// collected while the drop runs, and waited for.
    #[tokio::test]
    async fn a_dropped_acquisitions_cleanup_is_waited_for() {
        let cleanups = AcquisitionCleanups::default();
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let acquisition = cleanups.collecting(async move {
            let _entry = CleanupOnDrop::new(move || async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                flag.store(true, Ordering::SeqCst);
            });
            std::future::pending::<()>().await;
        });
        let gave_up = tokio::time::timeout(Duration::from_millis(10), acquisition).await;
        assert!(gave_up.is_err());
        assert!(cleanups.finished(Duration::from_secs(5)).await);
        assert!(
            done.load(Ordering::SeqCst),
            "returned before the clean-up ran"
        );
    }

    /// A clean-up that never ends is waited for no longer than asked.
    #[tokio::test]
    async fn waiting_for_a_stuck_cleanup_is_bounded() {
        let cleanups = AcquisitionCleanups::default();
        let acquisition = cleanups.collecting(async {
            spawn_cleanup(None, std::future::pending());
        });
        acquisition.await;
        let started = std::time::Instant::now();
        assert!(!cleanups.finished(Duration::from_millis(100)).await);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn outside_any_runtime_the_work_is_dropped_not_run() {
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = Flag(dropped.clone());
        spawn_detached(None, async move {
            let _keep = flag;
            unreachable!("no runtime to run on");
        });
        assert!(dropped.load(Ordering::SeqCst));
    }

    #[test]
    fn a_shut_down_runtime_does_not_panic() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let handle = runtime.handle().clone();
        drop(runtime);
        spawn_detached(Some(&handle), async {});
    }
}
