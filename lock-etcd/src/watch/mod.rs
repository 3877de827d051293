//! [`WatchHub`]: every deletion watch of a backend on one etcd watch stream.
//!
//! Waiters watch their predecessor's queue entry and holders their own;
//! each is a watch on one key, multiplexed on a single gRPC stream with
//! watch ids chosen here (etcd ≥ 3.4 accepts client-chosen ids), so holding
//! ten thousand locks costs ten thousand idle server-side watchers, not
//! ten thousand streams.
//!
//! Holder watches ([`WatchHub::watch_prefix_from`]) ride on the same
//! stream: one watch on a whole queue, every event passed on.
//!
//! `etcd-client` does not resume a watch stream that broke (member down,
//! leader lost, network cut). The hub's task ([`task`]) reconnects with
//! backoff and re-creates every watch from the revision after the last
//! event it saw, so no deletion is missed; if that history was compacted
//! meanwhile the listener hears [`Fired::Compacted`] and must re-read.

mod delayed;
mod fired;
mod target;
mod task;
mod waiters;

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use etcd_client::WatchClient;
use tokio::sync::mpsc;
use tokio::time::Instant;

use delayed::Delayed;
pub(crate) use fired::{Fired, Listener, RangeFired, RangeListener};
use target::{Target, Watch};
use task::Command;

/// Deletion watches over one shared, self-healing watch stream.
#[derive(Clone)]
pub(crate) struct WatchHub {
    /// Shared: cloning a gRPC client costs more than the rest of a watch
    /// registration, and every held lock's guard holds a hub.
    client: Arc<WatchClient>,
    next_id: Arc<AtomicI64>,
    /// Watches not yet due for the server, shared with the task so that
    /// queuing and dropping one wakes nobody.
    delayed: Arc<Mutex<Delayed>>,
    /// The running task's command queue; replaced when the task is gone
    /// (its runtime shut down).
    commands: Arc<Mutex<Option<mpsc::UnboundedSender<Command>>>>,
}

/// Keeps a watch alive; dropping it removes the watch.
pub(crate) struct WatchGuard {
    id: i64,
    hub: WatchHub,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        // Never sent to the server: forgetting it is enough.
        if self.hub.delayed().remove(self.id) {
            return;
        }
        self.hub.send(Command::Remove { id: self.id });
    }
}

impl fmt::Debug for WatchGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchGuard").field("id", &self.id).finish()
    }
}

impl WatchHub {
    /// A hub using `client`; its task starts with the first watch.
    pub(crate) fn new(client: WatchClient) -> Self {
        Self {
            client: Arc::new(client),
            next_id: Arc::new(AtomicI64::new(1)),
            delayed: Arc::new(Mutex::new(Delayed::default())),
            commands: Arc::new(Mutex::new(None)),
        }
    }

    /// Tells `listener` when `key` is deleted after revision `after` (the
    /// revision of the caller's view of it; see [`Fired`]).
    ///
    /// Returns at once. The key's watch is shared by every waiter on it
    /// and outlives them a while (see [`waiters`]); it starts at the
    /// revision current when etcd creates it, where it hears of writes as
    /// they commit. If that is later than `after`, the listener hears
    /// [`Fired::Created`] with that revision and must check the key as of
    /// it; a deletion already seen after `after` fires at once.
    pub(crate) fn watch_deletion(
        &self,
        key: Vec<u8>,
        after: i64,
        listener: Listener,
    ) -> WatchGuard {
        let id = self.next_id.fetch_add(2, Ordering::Relaxed);
        self.send(Command::Wait {
            id,
            new_watch_id: id + 1,
            key,
            after,
            listener,
        });
        self.guard(id)
    }

    /// Tells `listener` when `key` is deleted at `from_revision` or later,
    /// with the watch created on the server only after `delay`, and not at
    /// all if the guard is dropped before: a lock held for less than that
    /// costs no watch traffic and no wake-up of the hub's task. No deletion
    /// is missed meanwhile (the watch replays history from
    /// `from_revision`); it is only heard up to `delay` + 100 ms later.
    pub(crate) fn watch_deletion_from(
        &self,
        key: Vec<u8>,
        from_revision: i64,
        delay: Duration,
        listener: Listener,
    ) -> WatchGuard {
        let (id, watch) = self.new_watch(key, from_revision, listener);
        let first = self.delayed().push(Instant::now() + delay, id, watch);
        if first {
            self.send(Command::Wake);
        }
        self.guard(id)
    }

    /// Tells `listener` of every change under `prefix` from revision
    /// `from_revision` on, until the guard is dropped. The watch survives
    /// reconnects without a gap (it resumes after the last event passed
    /// on); it ends with [`RangeFired::Compacted`] if that history is gone.
    pub(crate) fn watch_prefix_from(
        &self,
        prefix: Vec<u8>,
        from_revision: i64,
        listener: RangeListener,
    ) -> WatchGuard {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let watch = Watch {
            key: prefix,
            next_revision: from_revision,
            target: Target::Range(listener),
        };
        self.send(Command::Add { id, watch });
        self.guard(id)
    }

    fn new_watch(&self, key: Vec<u8>, from_revision: i64, listener: Listener) -> (i64, Watch) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let watch = Watch {
            key,
            next_revision: from_revision,
            target: Target::Once(listener),
        };
        (id, watch)
    }

    fn guard(&self, id: i64) -> WatchGuard {
        WatchGuard {
            id,
            hub: self.clone(),
        }
    }

    fn delayed(&self) -> MutexGuard<'_, Delayed> {
        self.delayed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `command` for the task, starting a task if there is none.
    /// Outside a runtime nothing can run: the command is dropped (a watch
    /// added then never fires; its waiter has no runtime to wait on).
    fn send(&self, command: Command) {
        let mut commands = self.commands.lock().unwrap_or_else(|p| p.into_inner());
        let command = match commands.as_ref() {
            Some(tx) => match tx.send(command) {
                Ok(()) => return,
                Err(mpsc::error::SendError(command)) => command,
            },
            None => command,
        };
        if matches!(command, Command::Remove { .. }) {
            return; // the task that knew the watch is gone anyway
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(command);
        let delayed = Arc::clone(&self.delayed);
        runtime.spawn(task::run(WatchClient::clone(&self.client), rx, delayed));
        *commands = Some(tx);
    }
}

impl fmt::Debug for WatchHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchHub").finish_non_exhaustive()
    }
}
