//! One object of a memory store — a name's lock, or its semaphore: its
//! holds, the queue of requests waiting for it, and the tokens granted to
//! waiters not yet collected.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::backend::{AcquireRequest, LossReporter};
use crate::info::{HoldKind, LockInfo};
use crate::key::LockName;
use crate::loss_reason::LossReason;
use crate::owner::OwnerId;
use crate::token::FencingToken;

/// A name's lock or its semaphore: separate objects with separate tokens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct ObjectId {
    pub(super) name: LockName,
    pub(super) semaphore: bool,
}

impl ObjectId {
    /// The object a hold of `kind` on `name` is taken in.
    pub(super) fn of(name: &LockName, kind: HoldKind) -> Self {
        Self {
            name: name.clone(),
            semaphore: kind.is_permit(),
        }
    }

    /// The lock of `name`.
    pub(super) fn lock(name: &LockName) -> Self {
        Self {
            name: name.clone(),
            semaphore: false,
        }
    }
}

/// One hold.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) owner: OwnerId,
    pub(super) token: FencingToken,
    pub(super) kind: HoldKind,
    pub(super) value: String,
    pub(super) expires_at: Instant,
    pub(super) reporter: LossReporter,
}

impl Entry {
    pub(super) fn live(&self, now: Instant) -> bool {
        now < self.expires_at
    }

    pub(super) fn info(&self, now: Instant) -> LockInfo {
        LockInfo::new(
            self.owner.as_str(),
            self.token,
            Some(self.expires_at.saturating_duration_since(now)),
        )
        .with_value(self.value.as_str())
        .with_kind(self.kind)
    }
}

/// What a hold asks for, kept while its request waits in the queue.
#[derive(Debug)]
pub(super) struct Ask {
    pub(super) owner: OwnerId,
    pub(super) kind: HoldKind,
    pub(super) value: String,
    pub(super) ttl: Duration,
    pub(super) reporter: LossReporter,
}

impl Ask {
    pub(super) fn of(request: &AcquireRequest) -> Self {
        Self {
            owner: request.owner.clone(),
            kind: request.kind,
            value: request.value.clone(),
            ttl: request.ttl,
            reporter: request.loss.clone(),
        }
    }
}

/// A request waiting in an object's queue.
#[derive(Debug)]
pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) ask: Ask,
    pub(super) wake: Arc<Notify>,
}

/// One object's holders, the queue of its waiters, and what was granted
/// to waiters but not yet collected.
#[derive(Debug, Default)]
pub(super) struct Object {
    pub(super) holders: Vec<Entry>,
    pub(super) queue: VecDeque<Waiter>,
    /// Tokens of waiters granted but not yet collected, and when their
    /// leases began, by waiter id.
    pub(super) granted: HashMap<u64, (FencingToken, Instant)>,
    /// A semaphore's limit, stored while it has holders.
    pub(super) limit: Option<u32>,
}

impl Object {
    /// Drops expired holders, telling each it lost its hold; whether any
    /// was dropped.
    pub(super) fn purge(&mut self, now: Instant) -> bool {
        let before = self.holders.len();
        self.holders.retain(|entry| {
            let live = entry.live(now);
            if !live {
                entry.reporter.report(LossReason::ValidityExpired);
            }
            live
        });
        self.holders.len() < before
    }

    /// The first live holder and when its lease ends.
    pub(super) fn first_holder(&self, now: Instant) -> Option<(LockInfo, Instant)> {
        let entry = self.holders.iter().find(|e| e.live(now))?;
        Some((entry.info(now), entry.expires_at))
    }

    /// Whether a hold of `kind` fits beside the current holders.
    pub(super) fn fits(&self, kind: HoldKind) -> bool {
        match kind {
            HoldKind::Exclusive => self.holders.is_empty(),
            HoldKind::Shared => self.holders.iter().all(|h| h.kind == HoldKind::Shared),
            HoldKind::Permit { limit } => self.holders.len() < limit as usize,
        }
    }

    /// Whether it has no holder, no waiter and nothing left to collect.
    pub(super) fn is_unused(&self) -> bool {
        self.holders.is_empty() && self.queue.is_empty() && self.granted.is_empty()
    }

    /// The soonest end of a lease among its holders.
    pub(super) fn soonest_expiry(&self) -> Option<Instant> {
        self.holders.iter().map(|e| e.expires_at).min()
    }
}
