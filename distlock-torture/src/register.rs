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
//!   (see [`primitive`](crate::primitive)), a holder reported its permit
//!   held after a newcomer made the holders more than `limit` and it was
//!   the one that had gone longest without a word (a frozen or cut-off
//!   holder, whose permit must have lapsed);
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

/// One client's current holding of a key.
#[derive(Debug)]
struct Holding {
    token: u64,
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

#[derive(Debug, Default)]
struct State {
    keys: BTreeMap<String, KeyState>,
    figures: Figures,
    longest_idle_ns: u64,
}

/// The register of one run, shared by every client.
#[derive(Debug, Default)]
pub struct Register {
    state: Mutex<State>,
}

impl Register {
    /// An empty register.
    pub fn new() -> Self {
        Self::default()
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
        } = &mut *state;
        let (key, verdict) = match op {
            Op::Waiting { key } => {
                keys.entry(key.clone())
                    .or_insert_with(|| KeyState::of(&key))
                    .waiting
                    .insert(client);
                (key, Verdict::Accepted)
            }
            Op::GaveUp { key } => {
                figures.gave_up += 1;
                keys.entry(key.clone())
                    .or_insert_with(|| KeyState::of(&key))
                    .waiting
                    .remove(&client);
                (key, Verdict::Accepted)
            }
            Op::Begin { key, token, claim } => {
                let entry = keys
                    .entry(key.clone())
                    .or_insert_with(|| KeyState::of(&key));
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
                        last_claim: claim,
                        replaced_at: None,
                        overlapped: false,
                    },
                );
                entry.make_room(client, arrival);
                (key, entry.fenced(client, token, claim, figures))
            }
            Op::Write { key, token, claim } => {
                let entry = keys
                    .entry(key.clone())
                    .or_insert_with(|| KeyState::of(&key));
                let verdict = entry.fenced(client, token, claim, figures);
                figures.writes_accepted += u64::from(verdict == Verdict::Accepted);
                (key, verdict)
            }
            Op::End { key } => {
                keys.entry(key.clone())
                    .or_insert_with(|| KeyState::of(&key))
                    .holdings
                    .remove(&client);
                (key, Verdict::Accepted)
            }
            Op::Lost { key } => {
                figures.losses += 1;
                keys.entry(key.clone())
                    .or_insert_with(|| KeyState::of(&key))
                    .holdings
                    .remove(&client);
                (key, Verdict::Accepted)
            }
        };
        if let Some(entry) = keys.get_mut(&key) {
            entry.track_idle(arrival, longest_idle_ns);
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
            ..
        } = &mut *state;
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
    /// `newcomer` just began holding: if that makes more holders than the
    /// limit, the ones that have gone longest without saying "held" (the
    /// one other holder, for a lock) must have lost their hold by now.
    fn make_room(&mut self, newcomer: ClientId, arrival: u64) {
        let mut live: Vec<(u64, ClientId)> = self
            .holdings
            .iter()
            .filter(|(id, h)| **id != newcomer && h.replaced_at.is_none())
            .map(|(id, h)| (h.last_claim, *id))
            .collect();
        let excess = (live.len() + 1).saturating_sub(self.limit);
        live.sort_unstable();
        for (_, id) in live.into_iter().take(excess) {
            if let Some(holding) = self.holdings.get_mut(&id) {
                holding.replaced_at = Some(arrival);
            }
        }
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
mod tests {
    use super::*;

    fn begin(key: &str, token: u64, claim: u64) -> Op {
        Op::Begin {
            key: key.into(),
            token,
            claim,
        }
    }

    fn write(key: &str, token: u64, claim: u64) -> Op {
        Op::Write {
            key: key.into(),
            token,
            claim,
        }
    }

    fn end(key: &str) -> Op {
        Op::End { key: key.into() }
    }

    #[test]
    fn clean_hand_offs_count_nothing_unsafe() {
        let r = Register::new();
        assert_eq!(r.apply_at(1, begin("k", 1, 10), 11), Verdict::Accepted);
        assert_eq!(r.apply_at(1, write("k", 1, 12), 13), Verdict::Accepted);
        r.apply_at(1, end("k"), 14);
        assert_eq!(r.apply_at(2, begin("k", 2, 15), 16), Verdict::Accepted);
        let f = r.figures();
        assert_eq!((f.acquisitions, f.writes_accepted), (2, 1));
        assert_eq!(
            (f.overlaps, f.unsafe_accepted, f.token_regressions),
            (0, 0, 0)
        );
    }

    #[test]
    fn a_replaced_holder_claiming_its_lock_after_the_takeover_is_an_overlap() {
        let r = Register::new();
        r.apply_at(1, begin("k", 1, 10), 11);
        r.apply_at(2, begin("k", 2, 20), 21);
        // Its guard said "held" at 30, after the new holder began at 21.
        assert_eq!(r.apply_at(1, write("k", 1, 30), 31), Verdict::Stale);
        let f = r.figures();
        assert_eq!((f.overlaps, f.stale_rejected, f.unsafe_accepted), (1, 1, 0));
    }

    #[test]
    fn a_write_claimed_before_the_takeover_but_arriving_after_is_fenced_not_an_overlap() {
        let r = Register::new();
        r.apply_at(1, begin("k", 1, 10), 11);
        r.apply_at(2, begin("k", 2, 20), 21);
        // Checked at 15 (before the takeover), arrives at 40: the fencing
        // check must refuse it, and no guard lied.
        assert_eq!(r.apply_at(1, write("k", 1, 15), 40), Verdict::Stale);
        let f = r.figures();
        assert_eq!((f.overlaps, f.stale_rejected), (0, 1));
    }

    #[test]
    fn tokens_going_backwards_let_a_replaced_holders_write_through_and_are_counted() {
        let r = Register::new();
        r.apply_at(1, begin("k", 5, 10), 11);
        // A restarted store hands out a lower token to someone else.
        assert_eq!(r.apply_at(2, begin("k", 1, 20), 21), Verdict::Stale);
        assert_eq!(r.apply_at(1, write("k", 5, 15), 30), Verdict::Accepted);
        let f = r.figures();
        assert_eq!((f.token_regressions, f.unsafe_accepted), (1, 1));
    }

    #[test]
    fn a_token_handed_to_two_clients_is_unsafe() {
        let r = Register::new();
        r.apply_at(1, begin("k", 3, 10), 11);
        r.apply_at(1, end("k"), 12);
        assert_eq!(r.apply_at(2, begin("k", 3, 20), 21), Verdict::Accepted);
        let f = r.figures();
        assert_eq!((f.token_regressions, f.unsafe_accepted), (1, 1));
    }

    #[test]
    fn keys_are_judged_apart() {
        let r = Register::new();
        r.apply_at(1, begin("a", 7, 10), 11);
        r.apply_at(2, begin("b", 1, 12), 13);
        r.apply_at(1, write("a", 7, 14), 15);
        let f = r.figures();
        assert_eq!(
            (f.overlaps, f.unsafe_accepted, f.token_regressions),
            (0, 0, 0)
        );
        assert_eq!(r.holders(), BTreeSet::from([1, 2]));
    }

    #[test]
    fn permits_up_to_the_limit_hold_side_by_side() {
        let r = Register::new();
        r.apply_at(1, begin("permits-2-0", 4, 10), 11);
        r.apply_at(2, begin("permits-2-0", 5, 12), 13);
        // Lower token than the newest permit: not stale, permits share.
        assert_eq!(
            r.apply_at(1, write("permits-2-0", 4, 14), 15),
            Verdict::Accepted
        );
        r.apply_at(2, end("permits-2-0"), 16);
        r.apply_at(3, begin("permits-2-0", 6, 17), 18);
        r.apply_at(1, write("permits-2-0", 4, 19), 20);
        let f = r.figures();
        assert_eq!(
            (
                f.overlaps,
                f.unsafe_accepted,
                f.stale_rejected,
                f.token_regressions
            ),
            (0, 0, 0, 0)
        );
    }

    #[test]
    fn a_permit_holder_past_the_limit_claiming_its_permit_is_an_overlap() {
        let r = Register::new();
        r.apply_at(1, begin("permits-2-0", 1, 10), 11);
        r.apply_at(2, begin("permits-2-0", 2, 12), 13);
        // Client 1 goes silent (frozen); client 2 writes on.
        r.apply_at(2, write("permits-2-0", 2, 30), 31);
        // A third holder: one of the first two must have lost its permit,
        // the silent one.
        r.apply_at(3, begin("permits-2-0", 3, 40), 41);
        r.apply_at(2, write("permits-2-0", 2, 50), 51);
        assert_eq!(r.figures().overlaps, 0);
        // The frozen one wakes and its guard says "held".
        r.apply_at(1, write("permits-2-0", 1, 60), 61);
        let f = r.figures();
        assert_eq!((f.overlaps, f.permits, f.acquisitions), (1, 3, 3));
    }

    #[test]
    fn the_longest_wait_while_nobody_holds_is_kept() {
        let r = Register::new();
        r.apply_at(1, begin("k", 1, 0), 1_000_000);
        r.apply_at(2, Op::Waiting { key: "k".into() }, 2_000_000);
        // Holder killed at 5 ms; the waiter gets the lock at 12 ms.
        r.apply_at(1, Op::Lost { key: "k".into() }, 5_000_000);
        r.apply_at(2, begin("k", 2, 0), 12_000_000);
        assert_eq!(r.figures().longest_idle_wait_ms, 7);
        assert_eq!(r.figures().losses, 1);
    }
}
