//! One Redlock acquire round: the acquire script on every master, the
//! raise of the fencing counters, and the undo of a round that did not
//! take the lock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::backend::{clock_drift, AcquireRequest, Acquired, Attempt, CleanupOnDrop, Renewal};
use lock_core::{FencingToken, LockError};

use super::held::RedlockHeld;
use super::{Inner, RedlockBackend};
use crate::conn::{self, ScriptCall};
use crate::keys::LockKeys;
use crate::renewal::HeldKeys;
use crate::retry::CleanupRetry;
use crate::scripts::{scripts, AcquireReply};
use crate::value::redlock_rest;

/// How the masters answered one acquire.
#[derive(Debug, Default)]
struct Tally {
    /// Masters that granted the lock, with their counter values.
    granted: Vec<(usize, u64)>,
    /// Remaining leases of other holders.
    held: Vec<Option<Duration>>,
    /// Masters that did not answer.
    failed: usize,
}

impl Tally {
    /// Whether all `n` masters granted the lock with the same counter
    /// value, `token`: what a raise to `token` would leave behind.
    fn in_step(&self, n: usize, token: u64) -> bool {
        self.granted.len() == n && self.granted.iter().all(|&(_, t)| t == token)
    }
}

impl RedlockBackend {
    /// One Redlock round; see the backend's module docs.
    pub(super) async fn attempt(
        &self,
        keys: &LockKeys,
        request: &AcquireRequest,
    ) -> Result<Attempt, LockError> {
        let inner = &self.inner;
        let owner = request.owner.as_str();
        let started = Instant::now();
        // Covers cancellation only; a failed round is undone inline below,
        // so no background undo can delete what a later round of the same
        // acquisition (same owner) takes.
        let undo_on_drop = {
            let (inner, keys, owner) = (Arc::clone(inner), keys.clone(), owner.to_owned());
            let ttl = request.ttl;
            CleanupOnDrop::new(move || undo(inner, keys, owner, ttl))
        };
        let tally = self
            .acquire_on_all(keys, owner, request.ttl, &request.value)
            .await;
        let n = inner.nodes.len();
        if tally.granted.len() >= inner.quorum {
            let token = tally.granted.iter().map(|&(_, t)| t).max().unwrap_or(0);
            let raised = if tally.in_step(n, token) {
                // Every master counts `token` and holds our lock stamped
                // with it: the raise would change nothing.
                n
            } else {
                self.raise_all(keys, owner, token).await
            };
            let drift = clock_drift(request.ttl);
            if raised >= inner.quorum && started.elapsed() + drift < request.ttl {
                undo_on_drop.disarm();
                return Ok(Attempt::Acquired(Acquired {
                    token: FencingToken::new(token),
                    requested_at: started,
                    renewal: Renewal::Lease,
                    held: Box::new(RedlockHeld::new(
                        Arc::clone(inner),
                        HeldKeys::new(keys.clone(), request),
                    )),
                }));
            }
            // Too slow, or the raise was not confirmed: undo and report.
            undo_round(inner, keys, owner).await;
            undo_on_drop.disarm();
            return Err(LockError::Unavailable {
                message: format!(
                    "Redlock: the lock on {} masters could not be confirmed in time",
                    tally.granted.len()
                ),
                source: None,
            });
        }
        if !tally.granted.is_empty() || tally.failed > 0 {
            undo_round(inner, keys, owner).await;
        }
        undo_on_drop.disarm();
        if tally.held.len() > n - inner.quorum {
            let retry_after = tally.held.iter().flatten().min().copied();
            return Ok(Attempt::Held { retry_after });
        }
        Err(LockError::Unavailable {
            message: format!(
                "Redlock: {} of {n} masters granted the lock, {} did not answer; {} needed",
                tally.granted.len(),
                tally.failed,
                inner.quorum
            ),
            source: None,
        })
    }

    async fn acquire_on_all(
        &self,
        keys: &LockKeys,
        owner: &str,
        ttl: Duration,
        value: &str,
    ) -> Tally {
        let ttl_ms = ttl.as_millis() as u64;
        // Never queued; the value is number 0 of the holder's values.
        let rest = match value {
            "" => String::new(),
            value => redlock_rest(0, value),
        };
        let names = [keys.lock(), keys.counter(), keys.watched()];
        let args: [&dyn conn::ToArg; 6] = [&owner, &ttl_ms, &"0", &0, &"", &rest];
        let call = ScriptCall::new("Redlock acquire", &scripts().acquire, &names, &args);
        let replies = self
            .inner
            .eval_on::<Vec<i64>>(0..self.inner.nodes.len(), &call.idempotent())
            .await;
        let mut tally = Tally::default();
        for (i, reply) in replies.into_iter().enumerate() {
            match reply.map(|reply| AcquireReply::parse(&reply)) {
                Ok(AcquireReply::Acquired(token)) => tally.granted.push((i, token.get())),
                Ok(AcquireReply::Held { pttl, .. }) => tally.held.push(pttl),
                Err(_) => tally.failed += 1,
            }
        }
        tally
    }

    /// Raises every master's counter to `token`; returns how many masters
    /// confirmed that they hold our lock with that token.
    async fn raise_all(&self, keys: &LockKeys, owner: &str, token: u64) -> usize {
        let names = [keys.lock(), keys.counter(), keys.watched()];
        let args: [&dyn conn::ToArg; 2] = [&token, &owner];
        let call = ScriptCall::new("Redlock raise", &scripts().raise, &names, &args);
        self.inner
            .eval_on::<i64>(0..self.inner.nodes.len(), &call.idempotent())
            .await
            .into_iter()
            .filter(|r| matches!(r, Ok(1)))
            .count()
    }
}

/// One owner-checked delete on every master. A master that does not
/// answer keeps what it may have (it expires after the ttl, and a later
/// round of the same acquisition re-grants its own leftover).
async fn undo_round(inner: &Inner, keys: &LockKeys, owner: &str) {
    let args: [&dyn conn::ToArg; 2] = [&owner, &keys.channel()];
    let lock = keys.watched_lock();
    let call = ScriptCall::new("Redlock undo", &scripts().release, &lock, &args);
    inner.eval_on::<i64>(0..inner.nodes.len(), &call).await;
}

/// Owner-checked delete on every master, retried on masters that did not
/// answer until the lock would have expired anyway (for a cancelled
/// acquisition, whose owner id is never used again).
async fn undo(inner: Arc<Inner>, keys: LockKeys, owner: String, ttl: Duration) {
    let mut retry = CleanupRetry::until(Instant::now() + ttl * 2 + Duration::from_secs(5));
    let mut pending: Vec<usize> = (0..inner.nodes.len()).collect();
    while !pending.is_empty() {
        let args: [&dyn conn::ToArg; 2] = [&owner, &keys.channel()];
        let lock = keys.watched_lock();
        let call = ScriptCall::new("Redlock undo", &scripts().release, &lock, &args);
        let outcomes = inner
            .eval_on::<i64>(pending.iter().copied(), &call.idempotent())
            .await;
        pending = pending
            .into_iter()
            .zip(outcomes)
            .filter(|(_, o)| o.is_err())
            .map(|(i, _)| i)
            .collect();
        if pending.is_empty() || !retry.pause().await {
            return;
        }
    }
}
