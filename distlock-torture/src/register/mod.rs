//! The fencing-checked register every client writes to, and the timeline
//! it keeps to judge a run.
//!
//! A client that holds a lock first presents its token (`Begin`, the read
//! of its read-modify-write), then writes with it. The register accepts an
//! operation when the token is at least the highest it has seen, as a
//! storage service that checks fencing tokens would. Operations are judged
//! in the order they reach the register, on one monotonic clock shared by
//! every process of the machine, so a write that a paused holder sends
//! after it wakes is judged at the moment it arrives.
//!
//! From that timeline it counts what a safe lock must never do:
//! * an **overlap**: a holder reported its lock as held (its guard said so
//!   after the moment `claim`) although another client had begun holding
//!   the same key before that moment; for a semaphore of `limit` permits
//!   (see [`primitive`](crate::primitive)), more than `limit` clients
//!   certainly held a permit at one instant. A permit is certainly held
//!   over its span: from the first moment its guard said "held" (its
//!   acquisition had returned granted) to the last one (before it began
//!   its release, was told of a loss, or saw its lease end). Spans of
//!   ended holdings (released, lost, killed) are kept, so the count is
//!   over the whole timeline of grants and ends, not only the holdings
//!   still open; an end and a start at the same instant are ordered end
//!   first. Counted once per holding whose report shows it in such an
//!   instant;
//! * an **unsafe write accepted**: the fencing check let through a write
//!   from a holder another client had already replaced (its token was not
//!   lower: tokens went backwards), or a token another client had used;
//! * a **token regression**: a new holder got a token not above one already
//!   presented by someone else.
//!
//! A read-write lock's readers report [`Op::BeginRead`] and fenced reads
//! ([`Op::Read`]); a reader's span sharing an instant with a writer's is
//! an overlap, judged on the same timeline as a semaphore's permits,
//! readers side by side are not. Its writers are judged as a lock's
//! holders; a write below the highest token a read presented is stale,
//! and so is a read below the highest token a write presented.
//!
//! The fencing checks apply to locks, elections and read-write locks (one
//! holder, or readers, at a time); permits of a semaphore are held side
//! by side, so their writes are only judged for overlaps. It also counts stale writes rejected
//! (what fencing is for), losses signalled, and the longest stretch in
//! which some client waited while the key had room (nobody held a lock;
//! fewer than `limit` held permits).

mod figures;
mod key_state;
mod op;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use crate::clock::now_ns;
use crate::trail::Trail;
pub use figures::Figures;
use key_state::{Held, KeyState};
use op::describe;
pub use op::{ClientId, Op, Verdict};

/// Everything the register knows, under one lock.
#[derive(Debug)]
struct State {
    keys: BTreeMap<String, KeyState>,
    figures: Figures,
    longest_idle_ns: u64,
    trail: Trail,
}

impl State {
    /// Applies `op` from `client`, arrived at `arrival`, to its key and
    /// the figures: the key and the verdict.
    fn judge(&mut self, client: ClientId, op: Op, arrival: u64) -> (String, Verdict) {
        let Self { keys, figures, .. } = self;
        let reads = matches!(op, Op::BeginRead { .. } | Op::Read { .. });
        match op {
            Op::Waiting { key } => {
                KeyState::of_key(keys, &key).waiting.insert(client);
                (key, Verdict::Accepted)
            }
            Op::GaveUp { key } => {
                figures.gave_up += 1;
                KeyState::of_key(keys, &key).waiting.remove(&client);
                (key, Verdict::Accepted)
            }
            Op::Begin { key, token, claim } | Op::BeginRead { key, token, claim } => {
                let held = Held {
                    token,
                    claim,
                    reads,
                };
                let entry = KeyState::of_key(keys, &key);
                let verdict = entry.begin(client, held, arrival, figures);
                (key, verdict)
            }
            Op::Write { key, token, claim } | Op::Read { key, token, claim } => {
                let held = Held {
                    token,
                    claim,
                    reads,
                };
                let entry = KeyState::of_key(keys, &key);
                let verdict = entry.fenced(client, held, figures);
                let written = verdict == Verdict::Accepted && !held.reads;
                figures.writes_accepted += u64::from(written);
                (key, verdict)
            }
            Op::End { key } => {
                KeyState::of_key(keys, &key).close(client, arrival);
                (key, Verdict::Accepted)
            }
            Op::Lost { key } => {
                figures.losses += 1;
                KeyState::of_key(keys, &key).close(client, arrival);
                (key, Verdict::Accepted)
            }
        }
    }
}

/// The register of one run, shared by every client.
#[derive(Debug)]
pub struct Register {
    state: Mutex<State>,
}

impl Default for Register {
    fn default() -> Self {
        Self::new()
    }
}

impl Register {
    /// An empty register; its trail counts time from now.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State {
                keys: BTreeMap::new(),
                figures: Figures::default(),
                longest_idle_ns: 0,
                trail: Trail::new(now_ns()),
            }),
        }
    }

    /// Notes a fault (or anything else worth showing with an incident).
    pub fn note(&self, what: &str) {
        let mut state = self.lock();
        state.trail.record(now_ns(), format_args!("runner: {what}"));
    }

    /// Each overlap, unsafe write accepted or token regression found (the
    /// first few), with the events that led to it.
    pub fn incidents(&self) -> Vec<String> {
        self.lock().trail.incidents()
    }

    /// Applies `op` from `client` at the current moment.
    pub fn apply(&self, client: ClientId, op: Op) -> Verdict {
        self.apply_at(client, op, now_ns())
    }

    /// Applies `op` from `client` as if it arrived at `arrival`
    /// (monotonic nanoseconds, never before an earlier arrival).
    pub fn apply_at(&self, client: ClientId, op: Op, arrival: u64) -> Verdict {
        let mut state = self.lock();
        let described = describe(client, &op, &state.trail);
        state.trail.record(arrival, &described);
        let before = state.figures.violations();
        let (key, verdict) = state.judge(client, op, arrival);
        let State {
            keys,
            longest_idle_ns,
            ..
        } = &mut *state;
        if let Some(entry) = keys.get_mut(&key) {
            entry.track_idle(arrival, longest_idle_ns);
        }
        if let Some(what) = state.figures.new_violation(before) {
            (state.trail).incident(format_args!("{what} on `{key}` ({described}, {verdict:?})"));
        }
        verdict
    }

    /// Forgets `client` (its process was killed): it holds and waits for
    /// nothing from now on.
    pub fn gone(&self, client: ClientId) {
        self.gone_at(client, now_ns());
    }

    /// Forgets `client` as if killed at `arrival`.
    fn gone_at(&self, client: ClientId, arrival: u64) {
        let mut state = self.lock();
        let State {
            keys,
            longest_idle_ns,
            trail,
            ..
        } = &mut *state;
        trail.record(arrival, format_args!("client {client}: gone (killed)"));
        for entry in keys.values_mut() {
            entry.close(client, arrival);
            entry.waiting.remove(&client);
            entry.track_idle(arrival, longest_idle_ns);
        }
    }

    /// The clients holding some key now, by the register's timeline.
    pub fn holders(&self) -> BTreeSet<ClientId> {
        let state = self.lock();
        state
            .keys
            .values()
            .flat_map(|entry| entry.holdings.keys().copied())
            .collect()
    }

    /// The figures so far (an idle stretch still open counts up to now).
    pub fn figures(&self) -> Figures {
        let now = now_ns();
        let state = self.lock();
        let open = state
            .keys
            .values()
            .filter_map(|entry| entry.idle_since)
            .map(|since| now.saturating_sub(since))
            .max()
            .unwrap_or(0);
        Figures {
            longest_idle_wait_ms: state.longest_idle_ns.max(open) / 1_000_000,
            ..state.figures
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update is one step under the lock: a panic cannot leave a
        // half-applied operation behind.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests;
