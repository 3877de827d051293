//! Watching our own contender node, so a lock removed from outside (an
//! operator deleting the node, `force_release`) is reported lost.
//!
//! A waiter watches its node from its first look at the queue: if the node
//! went unnoticed, the waiter could take the lock without one. A lock taken
//! at once watches its node only after [`OWN_WATCH_DELAY`] (started by the
//! session's [`DelayedWatches`](crate::delayed::DelayedWatches), so a short
//! hold spawns no task): the watch would fire on our own release, so a
//! lock held for less costs no watch and no notification. The listing that
//! found the lock free showed our node there; a removal after it is
//! reported when the delayed `exists` finds the node gone.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lock_core::backend::LossReporter;
use lock_core::LossReason;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use zookeeper_client::{Error as ZkError, EventType};

use crate::delayed::DelayedWatch;
use crate::error;
use crate::session::{wait_connected, Session};

/// How long a lock taken at once is held before it watches its own node.
/// Most locks are held for less: they then cost the server no watch and
/// no notification (the watch would fire on our own release), which on
/// 1,000 keys, where the server is the bottleneck, is one packet in seven.
/// A removal from outside meanwhile is still reported, at most this much
/// plus a round trip late.
pub(crate) const OWN_WATCH_DELAY: Duration = Duration::from_millis(100);

/// How long the watch task waits for a lost connection before trying again.
const RECONNECT_WAIT: Duration = Duration::from_secs(1);

/// How long a watch whose node was deleted may take to learn whether its
/// session still lives (see [`gone_reason`]) before it reports the loss.
const GONE_CONFIRM_WITHIN: Duration = Duration::from_millis(500);

/// A watch on one contender node until it is deleted or its session ends:
/// a task, started at once or after [`OWN_WATCH_DELAY`], aborted when this
/// is dropped.
#[derive(Debug)]
pub(crate) struct NodeWatch {
    node: Arc<WatchedNode>,
    gone: watch::Receiver<bool>,
}

/// The watched node, as a [`NodeWatch`] and its task share it.
#[derive(Debug)]
pub(crate) struct WatchedNode {
    /// The watched node.
    path: String,
    /// Told when the node vanishes while holding.
    reporter: LossReporter,
    /// [`QUEUED`], [`HOLDING`] or [`RELEASED`]: only a node that vanishes
    /// while holding is a loss (while queued, the acquire sees it and queues
    /// again; once released, we deleted it ourselves).
    stage: AtomicU8,
    gone: watch::Sender<bool>,
    task: Mutex<Task>,
}

/// The watch task's life.
#[derive(Debug)]
enum Task {
    /// Not started yet (a delayed watch).
    Pending,
    Running(AbortHandle),
    /// The [`NodeWatch`] was dropped: never start.
    Stopped,
}

const QUEUED: u8 = 0;
const HOLDING: u8 = 1;
const RELEASED: u8 = 2;

impl NodeWatch {
    /// Starts watching `path` now; once [`hold`](Self::hold) is called,
    /// reports `reporter`'s lock lost when the node disappears other than
    /// by [`releasing`](Self::releasing).
    pub(crate) fn start(session: &Arc<Session>, path: String, reporter: LossReporter) -> Self {
        let (watch, node) = Self::unstarted(path, reporter);
        node.start(session);
        watch
    }

    /// Like [`start`](Self::start), but the watch starts only after
    /// [`OWN_WATCH_DELAY`], by the session's delayed watches. Until then,
    /// a vanished node is not known: [`is_gone`](Self::is_gone) is false.
    pub(crate) fn after_delay(
        session: &Arc<Session>,
        path: String,
        reporter: LossReporter,
    ) -> Self {
        let (watch, node) = Self::unstarted(path, reporter);
        let due = tokio::time::Instant::now() + OWN_WATCH_DELAY;
        session.delayed_watches().push(session, due, node);
        watch
    }

    /// A watch whose task is not started yet, and the node it shares with
    /// that task.
    fn unstarted(path: String, reporter: LossReporter) -> (Self, Arc<WatchedNode>) {
        let (gone_tx, gone) = watch::channel(false);
        let node = Arc::new(WatchedNode {
            path,
            reporter,
            stage: AtomicU8::new(QUEUED),
            gone: gone_tx,
            task: Mutex::new(Task::Pending),
        });
        let watch = Self {
            node: Arc::clone(&node),
            gone,
        };
        (watch, node)
    }

    /// The node now holds the lock: report it lost if it vanishes. False if
    /// it is already known to be gone.
    pub(crate) fn hold(&self) -> bool {
        self.node.stage.store(HOLDING, Ordering::SeqCst);
        !self.is_gone()
    }

    /// We are about to delete the node ourselves: stop watching it.
    pub(crate) fn releasing(&self) {
        self.node.stage.store(RELEASED, Ordering::SeqCst);
    }

    /// Whether the node is known to be gone.
    pub(crate) fn is_gone(&self) -> bool {
        *self.gone.borrow()
    }

    /// Resolves once the node is known to be gone.
    pub(crate) async fn gone(&self) {
        let mut gone = self.gone.clone();
        let _ = gone.wait_for(|gone| *gone).await;
    }
}

impl Drop for NodeWatch {
    fn drop(&mut self) {
        if let Task::Running(task) = std::mem::replace(&mut *self.node.task(), Task::Stopped) {
            task.abort();
        }
    }
}

impl WatchedNode {
    fn task(&self) -> MutexGuard<'_, Task> {
        // Every change to the slot is a single assignment.
        self.task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl DelayedWatch<Session> for WatchedNode {
    /// Whether the watch is still to be started: not started yet, and its
    /// lock neither released nor dropped.
    fn is_pending(&self) -> bool {
        self.stage.load(Ordering::SeqCst) != RELEASED && matches!(*self.task(), Task::Pending)
    }

    /// Starts the watch task on `session`, unless the lock was released or
    /// its [`NodeWatch`] dropped meanwhile, or it already runs. The task
    /// keeps the session open until it ends, so its watch is removed (when
    /// it is aborted) before the session closes.
    fn start(self: Arc<Self>, session: &Arc<Session>) {
        if self.stage.load(Ordering::SeqCst) == RELEASED {
            return;
        }
        let mut task = self.task();
        if matches!(*task, Task::Pending) {
            let handle = tokio::spawn(watch_node(Arc::clone(session), Arc::clone(&self)));
            *task = Task::Running(handle.abort_handle());
        }
    }
}

async fn watch_node(session: Arc<Session>, node: Arc<WatchedNode>) {
    let client = session.client();
    let path = &node.path;
    let reason = loop {
        if node.stage.load(Ordering::SeqCst) == RELEASED {
            return;
        }
        match client.check_and_watch_stat(path).await {
            Ok((None, _)) => break gone_reason(client).await,
            Ok((Some(_), watcher)) => {
                let event = watcher.changed().await;
                match event.event_type {
                    EventType::NodeDeleted => break gone_reason(client).await,
                    EventType::Session if event.session_state.is_terminated() => {
                        break LossReason::SessionExpired
                    }
                    // Data changed, or a session event that is not the end:
                    // watch again (the node may be gone by then).
                    _ => continue,
                }
            }
            Err(ZkError::SessionExpired | ZkError::ClientClosed | ZkError::AuthFailed) => {
                break LossReason::SessionExpired
            }
            Err(e) if error::is_unavailable(&e) => {
                if let Err(state) = wait_connected(client, RECONNECT_WAIT).await {
                    if state.is_terminated() {
                        break LossReason::SessionExpired;
                    }
                }
            }
            Err(e) => {
                tracing::warn!(%e, path, "distlock: cannot watch the lock node; retrying");
                tokio::time::sleep(RECONNECT_WAIT).await;
            }
        }
    };
    // Marked gone before the stage is read: `hold` sets the stage before it
    // reads `gone`, so one of the two sides always sees the other.
    node.gone.send_replace(true);
    if node.stage.load(Ordering::SeqCst) == HOLDING {
        node.reporter.report(reason);
    }
}

/// Why our node is gone: someone deleted it while our session lives
/// ([`LossReason::TakenAway`]), or the server ended our session, which
/// deletes its nodes ([`LossReason::SessionExpired`]).
///
/// The deletion alone does not say which: a server expiring a session
/// tells the session's own watches of its nodes' deletion before it
/// closes the connection, so a client frozen past its session timeout
/// reads the deletion before it learns, on reconnecting, that the session
/// expired. One more request tells the two apart — it is answered on a
/// live session and fails on an ended one — bounded by
/// [`GONE_CONFIRM_WITHIN`]: a session still not known to have ended by
/// then counts as live.
async fn gone_reason(client: &zookeeper_client::Client) -> LossReason {
    let asked = tokio::time::timeout(GONE_CONFIRM_WITHIN, async {
        match client.check_stat("/").await {
            Ok(_) => false,
            Err(ZkError::SessionExpired | ZkError::ClientClosed | ZkError::AuthFailed) => true,
            // The connection the server closed: the reconnection says.
            Err(_) => wait_connected(client, GONE_CONFIRM_WITHIN)
                .await
                .is_err_and(|state| state.is_terminated()),
        }
    })
    .await;
    if asked.unwrap_or(false) || client.state().is_terminated() {
        LossReason::SessionExpired
    } else {
        LossReason::TakenAway
    }
}
