//! Own-node watches that start late, set by one task per session.
//!
//! A lock taken at once watches its own node only after [`OWN_WATCH_DELAY`]
//! (see [`crate::watch`]). Waiting out that delay in a task of its own
//! would cost every acquisition a task spawn and every release an abort,
//! and each may wake another worker thread: measured on an uncontended
//! lock and release, about 4 % of the time. Instead the watch is queued
//! here, and one task per session, spawned when the queue gets its first
//! entry and ending when it empties, starts the watches as they come due.
//! Watches of locks released before then are dropped without a wake-up
//! (see [`DueQueue`]).

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use lock_core::backend::{DueQueue, LossReporter};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::session::Session;
use crate::watch::{NodeWatch, Shared};

/// How long a lock taken at once is held before it watches its own node.
/// Most locks are held for less: they then cost the server no watch and
/// no notification (the watch would fire on our own release), which on
/// 1,000 keys, where the server is the bottleneck, is one packet in seven.
/// A removal from outside meanwhile is still reported, at most this much
/// plus a round trip late.
pub(crate) const OWN_WATCH_DELAY: Duration = Duration::from_millis(100);

/// Watches coming due within this much of each other are started
/// together, so the task wakes at most this often.
const BATCH: Duration = Duration::from_millis(10);

/// The watches a session has yet to start.
#[derive(Debug, Default)]
pub(crate) struct DelayedWatches {
    queue: Arc<Mutex<Queue>>,
}

#[derive(Debug, Default)]
struct Queue {
    due: DueQueue<Arc<Shared>>,
    /// The task starting the watches in `due`, if one runs. It may have
    /// died with the runtime it ran on (a locker used from several
    /// runtimes): then the next lock starts another.
    drainer: Option<JoinHandle<()>>,
}

fn lock(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    // No update leaves the queue half-changed.
    queue
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A watch on `session`'s node `path`, started after [`OWN_WATCH_DELAY`];
/// see [`NodeWatch::start`] for what it reports.
pub(crate) fn watch_later(
    session: &Arc<Session>,
    path: String,
    reporter: LossReporter,
) -> NodeWatch {
    let (watch, shared) = NodeWatch::later(path, reporter);
    let queue = &session.delayed_watches().queue;
    let mut pending = lock(queue);
    pending.due.push(Instant::now() + OWN_WATCH_DELAY, shared);
    let running = matches!(&pending.drainer, Some(task) if !task.is_finished());
    if !running {
        pending.drainer = Some(tokio::spawn(drain(
            Arc::clone(queue),
            Arc::downgrade(session),
        )));
    }
    watch
}

/// Starts the queued watches as they come due, until the queue is empty
/// or the session is gone (and with it every lock that could be lost).
async fn drain(queue: Arc<Mutex<Queue>>, session: Weak<Session>) {
    loop {
        let next = {
            let mut pending = lock(&queue);
            match pending.due.next_due(|shared| shared.is_pending()) {
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
        for shared in due {
            shared.start(&session);
        }
    }
}
