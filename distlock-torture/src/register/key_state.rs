//! One key as the register sees it: who holds it since when, who waits,
//! the highest token presented; and the judgments made on it (the
//! fencing check, overlaps, idle stretches).

use std::collections::{BTreeMap, BTreeSet};

use super::figures::Figures;
use super::op::{ClientId, Verdict};
use crate::primitive::Primitive;

/// One client's current holding of a key.
#[derive(Debug)]
pub(super) struct Holding {
    token: u64,
    /// When its guard first said "held" (the hold was taken before).
    first_claim: u64,
    /// When its guard last said "held".
    last_claim: u64,
    /// When another client began holding the key after this one did.
    replaced_at: Option<u64>,
    overlapped: bool,
}

/// One key of the run: its holders, its waiters and the highest token
/// presented for it.
#[derive(Debug)]
pub(super) struct KeyState {
    /// How many may hold the key at once.
    limit: usize,
    highest: Option<u64>,
    /// Who presented `highest`.
    highest_from: Option<ClientId>,
    pub(super) holdings: BTreeMap<ClientId, Holding>,
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

impl KeyState {
    /// `client` begins holding the key (`key`) with `token`, its guard
    /// having said "held" after `claim`; the operation arrived at
    /// `arrival`. Counts the acquisition and what it shows, and returns
    /// the fencing check's verdict.
    pub(super) fn begin(
        &mut self,
        key: &str,
        client: ClientId,
        (token, claim): (u64, u64),
        arrival: u64,
        figures: &mut Figures,
    ) -> Verdict {
        figures.acquisitions += 1;
        match Primitive::of(key) {
            Primitive::Election => figures.leaderships += 1,
            Primitive::Semaphore { .. } => figures.permits += 1,
            Primitive::Lock => {}
        }
        self.waiting.remove(&client);
        let regressed = self.limit == 1
            && self.highest.is_some_and(|highest| token <= highest)
            && self.highest_from != Some(client);
        figures.token_regressions += u64::from(regressed);
        self.holdings.insert(
            client,
            Holding {
                token,
                first_claim: claim,
                last_claim: claim,
                replaced_at: None,
                overlapped: false,
            },
        );
        if self.limit == 1 {
            self.replace_others(client, arrival);
        }
        self.fenced(client, token, claim, figures)
    }

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
    pub(super) fn fenced(
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
