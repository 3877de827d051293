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
//!   certainly held a permit at one moment: each held from the moment it
//!   first reported its permit held (it was taken before) until the last
//!   moment its guard said "held", and more than `limit` of these spans
//!   share a moment (counted once per holding that reports it);
//! * an **unsafe write accepted**: the fencing check let through a write
//!   from a holder another client had already replaced (its token was not
//!   lower: tokens went backwards), or a token another client had used;
//! * a **token regression**: a new holder got a token not above one already
//!   presented by someone else.
//!
//! The fencing checks apply to locks and elections (one holder at a
//! time); permits of a semaphore are held side by side, so their writes
//! are only judged for overlaps. It also counts stale writes rejected
//! (what fencing is for), losses signalled, and the longest stretch in
//! which some client waited while the key had room (nobody held a lock;
//! fewer than `limit` held permits).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::clock::now_ns;
use crate::primitive::Primitive;
use crate::trail::Trail;

/// Who sent an operation: one client task or process of a run.
pub type ClientId = u32;

/// What a client tells the register.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// About to wait for `key`.
    Waiting {
        /// The lock's key.
        key: String,
    },
    /// The wait for `key` ended without the lock (timeout or error).
    GaveUp {
        /// The lock's key.
        key: String,
    },
    /// Holds `key` with `token`; its guard said "held" after `claim`.
    Begin {
        /// The lock's key.
        key: String,
        /// The guard's fencing token.
        token: u64,
        /// Monotonic nanoseconds read just before the guard was asked.
        claim: u64,
    },
    /// A write with `token`; the guard said "held" after `claim`.
    Write {
        /// The lock's key.
        key: String,
        /// The guard's fencing token.
        token: u64,
        /// Monotonic nanoseconds read just before the guard was asked.
        claim: u64,
    },
    /// Done with `key`: sent before the release.
    End {
        /// The lock's key.
        key: String,
    },
    /// The guard reported the lock on `key` lost.
    Lost {
        /// The lock's key.
        key: String,
    },
}

/// The register's answer to an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Taken in (or just noted, for operations without a token).
    Accepted,
    /// Refused by the fencing check: a higher token was already seen.
    Stale,
}

/// What a run did, as counted by the register.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// Holds taken (`Begin` operations): locks, leaderships and permits.
    pub acquisitions: u64,
    /// Of those, leaderships won.
    pub leaderships: u64,
    /// Of those, semaphore permits taken.
    pub permits: u64,
    /// Writes the fencing check accepted.
    pub writes_accepted: u64,
    /// Operations refused because a newer holder had presented a higher
    /// token: a replaced holder fenced off.
    pub stale_rejected: u64,
    /// Operations the fencing check accepted from a replaced holder, or
    /// with a token another client had used.
    pub unsafe_accepted: u64,
    /// Holders that reported their lock held after another client had
    /// begun holding it (counted once per replaced holding).
    pub overlaps: u64,
    /// New holders whose token was not above one presented before.
    pub token_regressions: u64,
    /// Losses the clients were told about.
    pub losses: u64,
    /// Waits that ended without the lock.
    pub gave_up: u64,
    /// The longest time, in milliseconds, in which a client waited for a
    /// key while no client held it.
    pub longest_idle_wait_ms: u64,
}

impl Figures {
    /// Overlaps, unsafe writes accepted and token regressions.
    fn violations(&self) -> (u64, u64, u64) {
        (self.overlaps, self.unsafe_accepted, self.token_regressions)
    }
}

/// `op` from `client`, in a line of the trail.
fn describe(client: ClientId, op: &Op, trail: &Trail) -> String {
    match op {
        Op::Waiting { key } => format!("client {client}: waits for `{key}`"),
        Op::GaveUp { key } => format!("client {client}: gave up `{key}`"),
        Op::Begin { key, token, claim } => format!(
            "client {client}: begins `{key}` with token {token} (held at {})",
            trail.ms(*claim)
        ),
        Op::Write { key, token, claim } => format!(
            "client {client}: writes `{key}` with token {token} (held at {})",
            trail.ms(*claim)
        ),
        Op::End { key } => format!("client {client}: ends `{key}`"),
        Op::Lost { key } => format!("client {client}: told `{key}` is lost"),
    }
}

/// One client's current holding of a key.
#[derive(Debug)]
struct Holding {
    token: u64,
    /// When its guard first said "held" (the hold was taken before).
    first_claim: u64,
    /// When its guard last said "held".
    last_claim: u64,
    /// When another client began holding the key after this one did.
    replaced_at: Option<u64>,
    overlapped: bool,
}

#[derive(Debug)]
struct KeyState {
    /// How many may hold the key at once.
    limit: usize,
    highest: Option<u64>,
    /// Who presented `highest`.
    highest_from: Option<ClientId>,
    holdings: BTreeMap<ClientId, Holding>,
    waiting: BTreeSet<ClientId>,
    idle_since: Option<u64>,
}

impl KeyState {
    /// The state of `key` in `keys`, made on first use.
    fn of_key<'a>(keys: &'a mut BTreeMap<String, KeyState>, key: &str) -> &'a mut KeyState {
        keys.entry(key.to_owned()).or_insert_with(|| Self::of(key))
    }

    fn of(key: &str) -> Self {
        Self {
            limit: Primitive::of(key).limit() as usize,
            highest: None,
            highest_from: None,
            holdings: BTreeMap::new(),
            waiting: BTreeSet::new(),
            idle_since: None,
        }
    }
}

#[derive(Debug)]
struct State {
    keys: BTreeMap<String, KeyState>,
    figures: Figures,
    longest_idle_ns: u64,
    trail: Trail,
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
        let State {
            keys,
            figures,
            longest_idle_ns,
            trail,
        } = &mut *state;
        let described = describe(client, &op, trail);
        trail.record(arrival, &described);
        let before = figures.violations();
        let (key, verdict) = match op {
            Op::Waiting { key } => {
                KeyState::of_key(keys, &key).waiting.insert(client);
                (key, Verdict::Accepted)
            }
            Op::GaveUp { key } => {
                figures.gave_up += 1;
                KeyState::of_key(keys, &key).waiting.remove(&client);
                (key, Verdict::Accepted)
            }
            Op::Begin { key, token, claim } => {
                let entry = KeyState::of_key(keys, &key);
                figures.acquisitions += 1;
                match Primitive::of(&key) {
                    Primitive::Election => figures.leaderships += 1,
                    Primitive::Semaphore { .. } => figures.permits += 1,
                    Primitive::Lock => {}
                }
                entry.waiting.remove(&client);
                let regressed = entry.limit == 1
                    && entry.highest.is_some_and(|highest| token <= highest)
                    && entry.highest_from != Some(client);
                figures.token_regressions += u64::from(regressed);
                entry.holdings.insert(
                    client,
                    Holding {
                        token,
                        first_claim: claim,
                        last_claim: claim,
                        replaced_at: None,
                        overlapped: false,
                    },
                );
                if entry.limit == 1 {
                    entry.replace_others(client, arrival);
                }
                (key, entry.fenced(client, token, claim, figures))
            }
            Op::Write { key, token, claim } => {
                let entry = KeyState::of_key(keys, &key);
                let verdict = entry.fenced(client, token, claim, figures);
                figures.writes_accepted += u64::from(verdict == Verdict::Accepted);
                (key, verdict)
            }
            Op::End { key } => {
                KeyState::of_key(keys, &key).holdings.remove(&client);
                (key, Verdict::Accepted)
            }
            Op::Lost { key } => {
                figures.losses += 1;
                KeyState::of_key(keys, &key).holdings.remove(&client);
                (key, Verdict::Accepted)
            }
        };
        if let Some(entry) = keys.get_mut(&key) {
            entry.track_idle(arrival, longest_idle_ns);
        }
        let (overlaps, unsafe_accepted, regressions) = figures.violations();
        if (overlaps, unsafe_accepted, regressions) != before {
            let what = match () {
                _ if overlaps > before.0 => "an overlap",
                _ if unsafe_accepted > before.1 => "an unsafe write accepted",
                _ => "a token regression",
            };
            trail.incident(format_args!("{what} on `{key}` ({described}, {verdict:?})"));
        }
        verdict
    }

    /// Forgets `client` (its process was killed): it holds and waits for
    /// nothing from now on.
    pub fn gone(&self, client: ClientId) {
        let arrival = now_ns();
        let mut state = self.lock();
        let State {
            keys,
            longest_idle_ns,
            trail,
            ..
        } = &mut *state;
        trail.record(arrival, format_args!("client {client}: gone (killed)"));
        for entry in keys.values_mut() {
            entry.holdings.remove(&client);
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

impl KeyState {
    /// `newcomer` just began holding a lock: the other holder, if any,
    /// must have lost it by now.
    fn replace_others(&mut self, newcomer: ClientId, arrival: u64) {
        for (id, holding) in &mut self.holdings {
            if *id != newcomer && holding.replaced_at.is_none() {
                holding.replaced_at = Some(arrival);
            }
        }
    }

    /// Whether more than `limit` holdings certainly held at one moment of
    /// `client`'s span (from its first "held" to its last): the most
    /// spans overlap at the start of one of them.
    fn crowded(&self, client: ClientId) -> bool {
        let Some(me) = self.holdings.get(&client) else {
            return false;
        };
        let holding_at = |at: u64| {
            (self.holdings.values()).filter(move |h| h.first_claim <= at && at <= h.last_claim)
        };
        self.holdings
            .values()
            .map(|h| h.first_claim)
            .filter(|&at| me.first_claim <= at && at <= me.last_claim)
            .any(|at| holding_at(at).count() > self.limit)
    }

    /// The fencing check for an operation with `token` from `client`,
    /// whose guard said "held" after `claim`; counts what it shows.
    fn fenced(
        &mut self,
        client: ClientId,
        token: u64,
        claim: u64,
        figures: &mut Figures,
    ) -> Verdict {
        let replaced_at = match self.holdings.get_mut(&client) {
            Some(holding) => {
                holding.last_claim = holding.last_claim.max(claim);
                if holding.token != token {
                    // A token the register never saw begin: treat it as
                    // this holding's from now on.
                    holding.token = token;
                }
                let replaced_at = holding.replaced_at;
                if replaced_at.is_some_and(|at| claim > at) && !holding.overlapped {
                    holding.overlapped = true;
                    figures.overlaps += 1;
                }
                replaced_at
            }
            None => None,
        };
        if self.limit > 1 {
            if self.crowded(client) {
                if let Some(holding) = self.holdings.get_mut(&client) {
                    figures.overlaps += u64::from(!holding.overlapped);
                    holding.overlapped = true;
                }
            }
            // Permits are held side by side: no single highest token.
            return Verdict::Accepted;
        }
        let stale = self.highest.is_some_and(|highest| token < highest);
        if stale {
            figures.stale_rejected += 1;
            return Verdict::Stale;
        }
        let shared_token = self.highest == Some(token) && self.highest_from != Some(client);
        if replaced_at.is_some() || shared_token {
            figures.unsafe_accepted += 1;
        }
        self.highest = Some(token);
        self.highest_from = Some(client);
        Verdict::Accepted
    }

    /// Opens or closes the stretch in which someone waits and nobody
    /// holds, at `now`.
    fn track_idle(&mut self, now: u64, longest: &mut u64) {
        let idle = !self.waiting.is_empty() && self.holdings.len() < self.limit;
        match (idle, self.idle_since) {
            (true, None) => self.idle_since = Some(now),
            (false, Some(since)) => {
                *longest = (*longest).max(now.saturating_sub(since));
                self.idle_since = None;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
