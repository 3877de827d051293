//! One key as the register sees it: who holds it since when, who waits,
//! the highest token presented; and the judgments made on it (the
//! fencing check, overlaps, idle stretches).
//!
//! A read-write lock is judged as a lock for its writers (one at a time,
//! fenced by the highest token) and on the timeline of every holder's
//! span for its readers: a reader certainly holding at an instant where a
//! writer certainly holds is an overlap, readers side by side are not.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::figures::Figures;
use super::op::{ClientId, Verdict};
use crate::primitive::Primitive;

/// How long an ended holding's span is kept to judge holdings reported
/// later (monotonic nanoseconds past its end, on the newest arrival's
/// clock). Forgetting a span can only hide an over-grant, never make one
/// up; no report reaches the register this late after its claim.
const SPAN_HORIZON_NS: u64 = 120_000_000_000;

/// The stretch in which a holding was certainly held: from its first
/// "held" (its acquisition had returned) to its last (before any release,
/// loss or lease end the client knew of). Half-open: a span ending at the
/// instant another begins does not share that instant with it (ends come
/// first); a span claimed once holds for that one instant (a nanosecond).
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    from: u64,
    to: u64,
    /// A reader's (of a read-write lock).
    shared: bool,
}

impl Span {
    /// The end of the span, exclusive.
    fn end(&self) -> u64 {
        self.to.max(self.from.saturating_add(1))
    }

    /// Whether it holds at `at`.
    fn holds_at(&self, at: u64) -> bool {
        self.from <= at && at < self.end()
    }

    /// Whether it shares an instant with `other`.
    fn meets(&self, other: &Span) -> bool {
        self.from < other.end() && other.from < self.end()
    }
}

/// What an operation with a token says: the guard's `token`, the
/// moment `claim` after which it said "held", and whether it is a read
/// lock's (`reads`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Held {
    pub(super) token: u64,
    pub(super) claim: u64,
    pub(super) reads: bool,
}

/// One client's current holding of a key.
#[derive(Debug)]
pub(super) struct Holding {
    token: u64,
    /// A reader's (of a read-write lock).
    shared: bool,
    /// When its guard first said "held" (the hold was taken before).
    first_claim: u64,
    /// When its guard last said "held".
    last_claim: u64,
    /// When another client began holding the key after this one did.
    replaced_at: Option<u64>,
    overlapped: bool,
}

impl Holding {
    /// The stretch in which it was certainly held, so far.
    fn span(&self) -> Span {
        Span {
            from: self.first_claim,
            to: self.last_claim,
            shared: self.shared,
        }
    }
}

/// One key of the run: its holders, its waiters and the highest token
/// presented for it.
#[derive(Debug)]
pub(super) struct KeyState {
    primitive: Primitive,
    /// How many may hold the key at once (of a read-write lock: writers).
    limit: usize,
    /// The highest token a write presented.
    highest: Option<u64>,
    /// The highest token a read presented (a write below it is stale).
    highest_read: Option<u64>,
    /// Who presented `highest`.
    highest_from: Option<ClientId>,
    pub(super) holdings: BTreeMap<ClientId, Holding>,
    /// The spans of holdings that ended (released, lost, their client
    /// killed) within [`SPAN_HORIZON_NS`], roughly in the order they
    /// ended; kept where holders are counted ([`timeline`](Self::timeline)).
    ended: VecDeque<Span>,
    pub(super) waiting: BTreeSet<ClientId>,
    /// Since when someone waits while the key has room, if so.
    pub(super) idle_since: Option<u64>,
}

impl KeyState {
    /// The state of `key` in `keys`, made on first use.
    pub(super) fn of_key<'a>(
        keys: &'a mut BTreeMap<String, KeyState>,
        key: &str,
    ) -> &'a mut KeyState {
        keys.entry(key.to_owned()).or_insert_with(|| Self::of(key))
    }

    fn of(key: &str) -> Self {
        let primitive = Primitive::of(key);
        Self {
            primitive,
            limit: primitive.limit() as usize,
            highest: None,
            highest_read: None,
            highest_from: None,
            holdings: BTreeMap::new(),
            ended: VecDeque::new(),
            waiting: BTreeSet::new(),
            idle_since: None,
        }
    }
}

impl KeyState {
    /// `client` begins holding the key as `held` says (a reader if
    /// `held.reads`); the operation arrived at `arrival`. Counts the
    /// acquisition and what it shows, and returns the fencing check's
    /// verdict.
    pub(super) fn begin(
        &mut self,
        client: ClientId,
        held: Held,
        arrival: u64,
        figures: &mut Figures,
    ) -> Verdict {
        figures.acquisitions += 1;
        match self.primitive {
            Primitive::Election => figures.leaderships += 1,
            Primitive::Semaphore { .. } => figures.permits += 1,
            Primitive::Lock | Primitive::ReadWrite => {}
        }
        self.waiting.remove(&client);
        let regressed = self.limit == 1
            && self.highest.is_some_and(|highest| held.token <= highest)
            && self.highest_from != Some(client);
        figures.token_regressions += u64::from(regressed);
        self.close(client, arrival);
        self.holdings.insert(
            client,
            Holding {
                token: held.token,
                shared: held.reads,
                first_claim: held.claim,
                last_claim: held.claim,
                replaced_at: None,
                overlapped: false,
            },
        );
        if self.limit == 1 {
            self.replace_others(client, held.reads, arrival);
        }
        self.fenced(client, held, figures)
    }

    /// `newcomer` just began holding a lock (a read lock if `reads`): the
    /// other holder, if any, must have lost it by now (a reader: only a
    /// writer must have).
    fn replace_others(&mut self, newcomer: ClientId, reads: bool, arrival: u64) {
        for (id, holding) in &mut self.holdings {
            let excluded = !(reads && holding.shared);
            if *id != newcomer && excluded && holding.replaced_at.is_none() {
                holding.replaced_at = Some(arrival);
            }
        }
    }

    /// Whether the key is judged on the timeline of its holders' spans:
    /// a semaphore or a read-write lock (a lock is judged by its
    /// takeovers).
    fn timeline(&self) -> bool {
        self.limit > 1 || self.primitive == Primitive::ReadWrite
    }

    /// Whether `held`, the spans holding at one instant, are more than
    /// the key allows: more than `limit` permits, or a writer beside
    /// anyone.
    fn too_many<'a>(&self, held: impl Iterator<Item = &'a Span>) -> bool {
        let (mut all, mut writers) = (0, 0);
        for span in held {
            all += 1;
            writers += usize::from(!span.shared);
        }
        match self.primitive {
            Primitive::ReadWrite => writers > 0 && all > 1,
            _ => all > self.limit,
        }
    }

    /// `client`'s holding ended (released, lost, its client killed) when
    /// its report arrived at `arrival`: its span joins the timeline.
    pub(super) fn close(&mut self, client: ClientId, arrival: u64) {
        let Some(holding) = self.holdings.remove(&client) else {
            return;
        };
        if !self.timeline() {
            return;
        }
        self.ended.push_back(holding.span());
        while (self.ended.front())
            .is_some_and(|span| span.to.saturating_add(SPAN_HORIZON_NS) < arrival)
        {
            self.ended.pop_front();
        }
    }

    /// Whether more holdings than the key allows ([`too_many`](Self::too_many))
    /// certainly held at one instant of `client`'s span, counting the
    /// spans of holdings still open and of those that ended: the holders
    /// within its span are most where one of them (or its own) begins.
    fn crowded(&self, client: ClientId) -> bool {
        let Some(me) = self.holdings.get(&client) else {
            return false;
        };
        let mine = me.span();
        let near: Vec<Span> = (self.holdings.values().map(Holding::span))
            .chain(self.ended.iter().copied())
            .filter(|span| span.meets(&mine))
            .collect();
        (near.iter())
            .map(|span| span.from.max(mine.from))
            .any(|at| self.too_many(near.iter().filter(|span| span.holds_at(at))))
    }

    /// The fencing check for an operation from `client` as `held` says
    /// (a read if `held.reads`); counts what it shows. A write below the
    /// highest token presented by a write or a read is stale; a read,
    /// below the highest presented by a write.
    pub(super) fn fenced(
        &mut self,
        client: ClientId,
        held: Held,
        figures: &mut Figures,
    ) -> Verdict {
        let Held {
            token,
            claim,
            reads,
        } = held;
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
        if self.timeline() && self.crowded(client) {
            if let Some(holding) = self.holdings.get_mut(&client) {
                figures.overlaps += u64::from(!holding.overlapped);
                holding.overlapped = true;
            }
        }
        if self.limit > 1 {
            // Permits are held side by side: no single highest token.
            return Verdict::Accepted;
        }
        let floor = if reads {
            self.highest
        } else {
            self.highest.max(self.highest_read)
        };
        if floor.is_some_and(|floor| token < floor) {
            figures.stale_rejected += 1;
            return Verdict::Stale;
        }
        let shared_token = self.highest == Some(token) && self.highest_from != Some(client);
        if replaced_at.is_some() || shared_token {
            figures.unsafe_accepted += 1;
        }
        if reads {
            self.highest_read = self.highest_read.max(Some(token));
        } else {
            self.highest = Some(token);
            self.highest_from = Some(client);
        }
        Verdict::Accepted
    }

    /// Opens or closes the stretch in which someone waits and nobody
    /// holds, at `now`.
    pub(super) fn track_idle(&mut self, now: u64, longest: &mut u64) {
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
