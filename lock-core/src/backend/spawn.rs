//! Running clean-up work in the background without blocking or panicking.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use tokio::runtime::Handle;

type CleanupFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Runs `work` on the current tokio runtime, or on `fallback` when called
/// outside one. With no runtime left at all, `work` is dropped unpolled:
/// whatever it owns is dropped synchronously, and a lock it meant to release
/// is left to expire. Never blocks, never panics.
pub fn spawn_detached<F>(fallback: Option<&Handle>, work: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let handle = Handle::try_current().ok().or_else(|| fallback.cloned());
    match handle {
        // A runtime that is shutting down drops the task instead of running
        // it; that is the best anyone can do then.
        Some(handle) => drop(handle.spawn(work)),
        None => drop(work),
    }
}

/// Runs an async clean-up when dropped, unless [disarmed](Self::disarm).
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
            spawn_detached(self.fallback.as_ref(), make());
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
