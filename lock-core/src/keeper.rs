//! Keeping leases alive: one timer task per locker for all its guards.
//!
//! A held lock whose lease must be renewed (or whose end must be reported)
//! needs something to act at its due times: every ttl/3 for a renewal, at
//! the end of the validity window for a loss. A task per lock would do, but
//! spawning one at every acquisition and aborting it at every release puts
//! two task wake-ups and a timer on each lock's path, and on a
//! multi-thread runtime those wake-ups land on another worker. Measured
//! with `distlock bench` on `mem://` (16 clients' runtime, 2 cores): a
//! hand-off took 41–44 µs at p50 with a task per lock and 30–32 µs with
//! the keeper; a failover after `resign()`, 138–164 µs against 72–80 µs.
//!
//! Instead, a locker's guards are kept by one [`LeaseKeeper`]: a map of
//! due times and one task that sleeps until the earliest. Registering a
//! lease is an insert under a mutex, and wakes the task only when the new
//! due time is earlier than the task's next wake-up, which a steady stream
//! of locks never is; a release is a removal. At a due time the task spawns
//! the renewal, which puts the lease back with its next due time when it
//! is done, and reports a lease whose validity window closed first.
//!
//! The task ends when nothing is left to keep and is started again by the
//! next lease. If its runtime shuts down while it still keeps leases taken
//! on another runtime, it hands them to a new task there; leases left with
//! no live runtime at all are reported lost, since nothing can renew them
//! (locks that do not expire, such as local files, stay held and wait for
//! their next check until a task runs again).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::Notify;
use tracing::Instrument;

use crate::backend::Renewal;
use crate::error::LockError;
use crate::loss_reason::LossReason;
use crate::renewal::Lease;

/// Keeps the leases of one locker's guards; see the module docs. Cheap to
/// clone (all clones keep the same leases).
#[derive(Clone, Default)]
pub(crate) struct LeaseKeeper {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the task early, for a due time before its next wake-up.
    wake: Notify,
}

#[derive(Default)]
struct State {
    /// Every kept lease not being renewed right now, by due time.
    due: BTreeMap<(Instant, u64), Arc<Entry>>,
    /// Makes due-time keys unique.
    next_seq: u64,
    /// Whether a task is running (or spawned and about to).
    running: bool,
    /// When the running task wakes next; `None` while it is about to look
    /// at the map anyway.
    wake_at: Option<Instant>,
}

/// One kept lease.
struct Entry {
    lease: Arc<Lease>,
    auto_renew: bool,
    /// The runtime the lock was taken on, where the keeper's task moves
    /// if its own runtime shuts down.
    runtime: Option<Handle>,
    span: tracing::Span,
    /// Where the entry sits in the map (`None` while its renewal runs) and
    /// whether it is still kept; changed only with the state locked.
    slot: Mutex<Slot>,
}

#[derive(Default)]
struct Slot {
    key: Option<(Instant, u64)>,
    stopped: bool,
}

/// A lease being kept; [`Kept::stop`] (or dropping it) stops keeping it.
pub(crate) struct Kept {
    shared: Arc<Shared>,
    entry: Arc<Entry>,
}

impl LeaseKeeper {
    /// Starts keeping `lease`: renewing it every ttl/3 from its request
    /// (with `auto_renew`), or else reporting the end of its validity;
    /// checking it every interval for [`Renewal::Check`]. `None` for a
    /// [`Renewal::Managed`] lease, which the store keeps by itself.
    pub(crate) fn keep(
        &self,
        lease: &Arc<Lease>,
        auto_renew: bool,
        span: tracing::Span,
    ) -> Option<Kept> {
        let first_due = match lease.renewal {
            Renewal::Managed => return None,
            Renewal::Lease if auto_renew => lease.requested_at() + lease.ttl / 3,
            Renewal::Lease => lease.valid_until(),
            Renewal::Check { interval } => Instant::now() + interval,
        };
        let entry = Arc::new(Entry {
            lease: Arc::clone(lease),
            auto_renew,
            runtime: Handle::try_current().ok(),
            span,
            slot: Mutex::default(),
        });
        self.shared.schedule(&entry, first_due);
        Some(Kept {
            shared: Arc::clone(&self.shared),
            entry,
        })
    }
}

impl Kept {
    /// Stops keeping the lease: no renewal starts after this returns (one
    /// under way may still finish).
    pub(crate) fn stop(&self) {
        let mut state = self.shared.state();
        let mut slot = lock(&self.entry.slot);
        slot.stopped = true;
        if let Some(key) = slot.key.take() {
            state.due.remove(&key);
        }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Puts `entry` in the map at `due`, unless it was stopped, and makes
    /// sure a task wakes by then.
    fn schedule(self: &Arc<Self>, entry: &Arc<Entry>, due: Instant) {
        let mut state = self.state();
        {
            let mut slot = lock(&entry.slot);
            if slot.stopped {
                return;
            }
            let key = (due, state.next_seq);
            state.next_seq += 1;
            slot.key = Some(key);
            state.due.insert(key, Arc::clone(entry));
        }
        if !state.running {
            state.running = true;
            state.wake_at = None;
            drop(state);
            let here = Handle::try_current().ok();
            if !self.start_on_any([here, entry.runtime.clone()]) {
                // No runtime takes it (shutting down): the next lease kept
                // tries again.
                self.state().running = false;
            }
        } else if state.wake_at.is_some_and(|at| due < at) {
            state.wake_at = Some(due);
            drop(state);
            self.wake.notify_one();
        }
    }

    /// Spawns the task on the first of `runtimes` that runs it; false if
    /// none does (every one gone or shutting down).
    fn start_on_any(self: &Arc<Self>, runtimes: impl IntoIterator<Item = Option<Handle>>) -> bool {
        runtimes
            .into_iter()
            .flatten()
            .any(|handle| self.start_on(&handle))
    }

    /// Spawns the task on `handle`; false if the runtime dropped it unrun.
    fn start_on(self: &Arc<Self>, handle: &Handle) -> bool {
        let refused = Arc::new(Mutex::new(false));
        let task = Task {
            shared: Arc::clone(self),
            done: false,
            refused: Arc::clone(&refused),
        };
        STARTING.with(|starting| starting.set(true));
        drop(handle.spawn(task.run()));
        STARTING.with(|starting| starting.set(false));
        let refused = *lock(&refused);
        !refused
    }

    /// Takes out every entry due by `now`. Also returns the next due time,
    /// and whether the task should stop: nothing was due and nothing is
    /// left (then the task counts as stopped already).
    fn take_due(&self, now: Instant) -> (Vec<Arc<Entry>>, Option<Instant>, bool) {
        let mut state = self.state();
        let mut due = Vec::new();
        while let Some(entry) = state.due.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let entry = entry.remove();
            lock(&entry.slot).key = None;
            due.push(entry);
        }
        let next = state.due.keys().next().map(|&(at, _)| at);
        let stop = next.is_none() && due.is_empty();
        if stop {
            state.running = false;
        }
        state.wake_at = next;
        (due, next, stop)
    }
}

thread_local! {
    /// Set while a task is being spawned: a task dropped unpolled by a
    /// runtime that is shutting down only reports back, instead of trying
    /// to start another.
    static STARTING: Cell<bool> = const { Cell::new(false) };
}

/// The keeper's task; see [`Task::run`].
struct Task {
    shared: Arc<Shared>,
    /// Set when the task ends by itself, with nothing left to keep.
    done: bool,
    /// Set if the task was dropped without running.
    refused: Arc<Mutex<bool>>,
}

impl Task {
    /// Acts on each entry as it falls due, sleeping in between; ends when
    /// nothing is left to keep.
    async fn run(mut self) {
        loop {
            let (due, next, stop) = self.shared.take_due(Instant::now());
            if stop {
                self.done = true;
                return;
            }
            for entry in due {
                self.act(entry);
            }
            // With nothing left in the map, look again: an entry acted on
            // may be back already, else the next look stops the task.
            if let Some(next) = next {
                tokio::select! {
                    () = tokio::time::sleep_until(next.into()) => {}
                    () = self.shared.wake.notified() => {}
                }
            }
        }
    }

    /// What a due entry needs: a renewal, a check, or the report of its end.
    fn act(&self, entry: Arc<Entry>) {
        let lease = &entry.lease;
        if lease.renewal == Renewal::Lease && Instant::now() >= lease.valid_until() {
            // No renewal succeeded within the window (or none was asked).
            lease.reporter.report(LossReason::ValidityExpired);
            return;
        }
        if lease.renewal == Renewal::Lease && !entry.auto_renew {
            // Only an extend() moved the window: wait for its new end.
            let until = lease.valid_until();
            self.shared.schedule(&entry, until);
            return;
        }
        let span = entry.span.clone();
        let shared = Arc::clone(&self.shared);
        let renewal = async move {
            if let Some(next) = renew(&entry.lease).await {
                shared.schedule(&entry, next);
            }
        };
        // On the keeper's runtime, which runs now; the lock's own may have
        // shut down.
        drop(tokio::spawn(renewal.instrument(span)));
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if STARTING.with(Cell::get) {
            // Dropped unpolled by a runtime that is going away.
            *lock(&self.refused) = true;
            return;
        }
        // The runtime is shutting down under the task. Leases taken on
        // another runtime get a task there; with none left, they are lost.
        let entries: Vec<Arc<Entry>> = {
            let mut state = self.shared.state();
            state.wake_at = None;
            state.due.values().cloned().collect()
        };
        if entries.is_empty()
            || self
                .shared
                .start_on_any(entries.iter().map(|entry| entry.runtime.clone()))
        {
            if entries.is_empty() {
                self.shared.state().running = false;
            }
            return;
        }
        // No runtime is left to run a task. A lease nobody renews will
        // expire: it is lost now (and no longer kept, so that a task
        // started later does not renew a lock its guard reports lost).
        // A lock that does not expire ([`Renewal::Check`]) stays held; it
        // waits for its next check until a task runs again.
        let mut state = self.shared.state();
        state.running = false;
        for entry in entries.iter().filter(|e| e.lease.renewal == Renewal::Lease) {
            let mut slot = lock(&entry.slot);
            if let Some(key) = slot.key.take() {
                state.due.remove(&key);
            }
            slot.stopped = true;
            drop(slot);
            entry.lease.reporter.report(LossReason::ValidityExpired);
        }
    }
}

/// One renewal (or check) of `lease`; returns when it is due next, or
/// `None` when the lease is lost.
async fn renew(lease: &Lease) -> Option<Instant> {
    let interval = match lease.renewal {
        Renewal::Check { interval } => interval,
        _ => lease.ttl / 3,
    };
    let span = tracing::debug_span!("distlock.renew");
    match lease.renew_once().instrument(span).await {
        Ok(()) => Some(Instant::now() + interval),
        Err(LockError::Lost { .. }) => None,
        Err(error) => {
            tracing::warn!(%error, "distlock: renewal failed, retrying");
            let retry = match lease.renewal {
                Renewal::Check { interval } => interval,
                _ => (lease.ttl / 10).max(Duration::from_millis(10)),
            };
            let next = Instant::now() + retry;
            Some(match lease.renewal {
                // Never past the window's end, where the loss is reported.
                Renewal::Lease => next.min(lease.valid_until()),
                _ => next,
            })
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update is a single step; a poisoned lock is still consistent.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl fmt::Debug for LeaseKeeper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state();
        f.debug_struct("LeaseKeeper")
            .field("kept", &state.due.len())
            .field("running", &state.running)
            .finish()
    }
}

impl fmt::Debug for Kept {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kept")
            .field("key", &self.entry.lease.key)
            .finish()
    }
}
