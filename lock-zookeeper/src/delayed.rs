//! Watches that start late, started by one task per session.
//!
//! A lock taken at once watches its own node only after a delay (see
//! [`crate::watch`]). Waiting out that delay in a task of its own would
//! cost every acquisition a task spawn and every release an abort, and
//! each may wake another worker thread: measured on an uncontended lock
//! and release, about 4 % of the time. Instead the watch is queued here,
//! and one task per session, spawned when the queue gets its first entry
//! and ending when it empties, starts the watches as they come due.
//! Watches of locks released before then are dropped without a wake-up
//! (see [`DueQueue`]).
//!
//! The queue knows its watches only as [`DelayedWatch`]es on a session of
//! type `S`, so that it can live in the session it serves.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use lock_core::backend::DueQueue;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Watches coming due within this much of each other are started
/// together, so the task wakes at most this often.
const BATCH: Duration = Duration::from_millis(10);

/// A watch waiting in a [`DelayedWatches`] queue of sessions of type `S`.
pub(crate) trait DelayedWatch<S>: Send + Sync + fmt::Debug {
    /// Whether the watch is still to be started; one that is not is
    /// dropped when it comes due.
    fn is_pending(&self) -> bool;

    /// Starts the watch on `session`.
    fn start(self: Arc<Self>, session: &Arc<S>);
}

/// The watches a session (of type `S`) has yet to start.
#[derive(Debug)]
pub(crate) struct DelayedWatches<S> {
    queue: Arc<Mutex<Queue<S>>>,
}

#[derive(Debug)]
struct Queue<S> {
    due: DueQueue<Arc<dyn DelayedWatch<S>>>,
    /// The task starting the watches in `due`, if one runs. It may have
    /// died with the runtime it ran on (a locker used from several
    /// runtimes): then the next lock starts another.
    drainer: Option<JoinHandle<()>>,
}

impl<S> Default for DelayedWatches<S> {
    fn default() -> Self {
        Self {
            queue: Arc::new(Mutex::new(Queue {
                due: DueQueue::default(),
                drainer: None,
            })),
        }
    }
}

fn lock<S>(queue: &Mutex<Queue<S>>) -> MutexGuard<'_, Queue<S>> {
    // No update leaves the queue half-changed.
    queue
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<S: Send + Sync + 'static> DelayedWatches<S> {
    /// Queues `watch` to start on `session` (the session this queue
    /// belongs to) at `due`, starting the session's task if none runs.
    pub(crate) fn push(&self, session: &Arc<S>, due: Instant, watch: Arc<dyn DelayedWatch<S>>) {
        let mut pending = lock(&self.queue);
        pending.due.push(due, watch);
        let running = matches!(&pending.drainer, Some(task) if !task.is_finished());
        if !running {
            pending.drainer = Some(tokio::spawn(drain(
                Arc::clone(&self.queue),
                Arc::downgrade(session),
            )));
        }
    }
}

/// Starts the queued watches as they come due, until the queue is empty
/// or the session is gone (and with it every lock that could be lost).
async fn drain<S>(queue: Arc<Mutex<Queue<S>>>, session: Weak<S>) {
    loop {
        let next = {
            let mut pending = lock(&queue);
            match pending.due.next_due(|watch| watch.is_pending()) {
                Some(next) => next,
                None => {
                    pending.drainer = None;
                    return;
                }
            }
        };
        tokio::time::sleep_until(next).await;
        let due = lock(&queue).due.take_due(Instant::now() + BATCH);
        let Some(session) = session.upgrade() else {
            let mut pending = lock(&queue);
            pending.due.clear();
            pending.drainer = None;
            return;
        };
        for watch in due {
            watch.start(&session);
        }
    }
}
