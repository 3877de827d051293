//! One Redlock acquire round: the acquire script on every master, the
//! raise of the fencing counters, and the undo of a round that did not
//! take the lock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::backend::{clock_drift, AcquireRequest, Acquired, Attempt, CleanupOnDrop, Renewal};
use lock_core::{FencingToken, LockError};

use super::core::RedlockCore;
use super::held::RedlockHeld;
use crate::conn::{ScriptCall, ToArg};
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

/// One Redlock round for `request` on the lock `keys` names; see the
/// backend's module docs.
pub(super) async fn attempt(
    core: &Arc<RedlockCore>,
    keys: &LockKeys,
    request: &AcquireRequest,
) -> Result<Attempt, LockError> {
    let owner = request.owner.as_str();
    let started = Instant::now();
    // Covers cancellation only; a failed round is undone inline below,
    // so no background undo can delete what a later round of the same
    // acquisition (same owner) takes.
    let undo_on_drop = {
        let (core, keys, owner) = (Arc::clone(core), keys.clone(), owner.to_owned());
        let ttl = request.ttl;
        CleanupOnDrop::new(move || undo(core, keys, owner, ttl))
    };
    let tally = acquire_on_all(core, keys, owner, request.ttl, &request.value).await;
    let outcome = if tally.granted.len() >= core.quorum {
        confirm(core, keys, request, &tally, started).await
    } else {
        without_majority(core, keys, owner, &tally).await
    };
    undo_on_drop.disarm();
    outcome
}

/// A round a majority granted (started at `started`): raises the
/// counters unless the masters are in step, and holds the lock if a
/// majority confirmed while the lease is still valid; else undoes the
/// round.
async fn confirm(
    core: &Arc<RedlockCore>,
    keys: &LockKeys,
    request: &AcquireRequest,
    tally: &Tally,
    started: Instant,
) -> Result<Attempt, LockError> {
    let owner = request.owner.as_str();
    let n = core.nodes.len();
    let token = tally.granted.iter().map(|&(_, t)| t).max().unwrap_or(0);
    let raised = if tally.in_step(n, token) {
        // Every master counts `token` and holds our lock stamped
        // with it: the raise would change nothing.
        n
    } else {
        raise_all(core, keys, owner, token).await
    };
    let drift = clock_drift(request.ttl);
    if raised >= core.quorum && started.elapsed() + drift < request.ttl {
        return Ok(Attempt::Acquired(Acquired {
            token: FencingToken::new(token),
            requested_at: started,
            renewal: Renewal::Lease,
            held: Box::new(RedlockHeld::new(
                Arc::clone(core),
                HeldKeys::new(keys.clone(), request),
            )),
        }));
    }
    // Too slow, or the raise was not confirmed: undo and report.
    undo_round(core, keys, owner).await;
    Err(LockError::Unavailable {
        message: format!(
            "Redlock: the lock on {} masters could not be confirmed in time",
            tally.granted.len()
        ),
        source: None,
    })
}

/// A round no majority granted: undoes what it took, then reports the
/// lock held (if too many masters have another holder for a majority to
/// grant it) or the masters unavailable.
async fn without_majority(
    core: &RedlockCore,
    keys: &LockKeys,
    owner: &str,
    tally: &Tally,
) -> Result<Attempt, LockError> {
    if !tally.granted.is_empty() || tally.failed > 0 {
        undo_round(core, keys, owner).await;
    }
    let n = core.nodes.len();
    if tally.held.len() > n - core.quorum {
        let retry_after = tally.held.iter().flatten().min().copied();
        return Ok(Attempt::Held { retry_after });
    }
    Err(LockError::Unavailable {
        message: format!(
            "Redlock: {} of {n} masters granted the lock, {} did not answer; {} needed",
            tally.granted.len(),
            tally.failed,
            core.quorum
        ),
        source: None,
    })
}

/// Runs the acquire script on every master, never queued.
async fn acquire_on_all(
    core: &RedlockCore,
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
    let args: [&dyn ToArg; 6] = [&owner, &ttl_ms, &"0", &0, &"", &rest];
    let call = ScriptCall::new("Redlock acquire", &scripts().acquire, &names, &args);
    let replies = core
        .eval_on::<Vec<i64>>(0..core.nodes.len(), &call.idempotent())
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
async fn raise_all(core: &RedlockCore, keys: &LockKeys, owner: &str, token: u64) -> usize {
    let names = [keys.lock(), keys.counter(), keys.watched()];
    let args: [&dyn ToArg; 2] = [&token, &owner];
    let call = ScriptCall::new("Redlock raise", &scripts().raise, &names, &args);
    core.eval_on::<i64>(0..core.nodes.len(), &call.idempotent())
        .await
        .into_iter()
        .filter(|r| matches!(r, Ok(1)))
        .count()
}

/// One owner-checked delete on every master. A master that does not
/// answer keeps what it may have (it expires after the ttl, and a later
/// round of the same acquisition re-grants its own leftover).
async fn undo_round(core: &RedlockCore, keys: &LockKeys, owner: &str) {
    let args: [&dyn ToArg; 2] = [&owner, &keys.channel()];
    let lock = keys.watched_lock();
    let call = ScriptCall::new("Redlock undo", &scripts().release, &lock, &args);
    core.eval_on::<i64>(0..core.nodes.len(), &call).await;
}

/// Owner-checked delete on every master, retried on masters that did not
/// answer until the lock would have expired anyway (for a cancelled
/// acquisition, whose owner id is never used again).
async fn undo(core: Arc<RedlockCore>, keys: LockKeys, owner: String, ttl: Duration) {
    let mut retry = CleanupRetry::until(Instant::now() + ttl * 2 + Duration::from_secs(5));
    let mut pending: Vec<usize> = (0..core.nodes.len()).collect();
    while !pending.is_empty() {
        let args: [&dyn ToArg; 2] = [&owner, &keys.channel()];
        let lock = keys.watched_lock();
        let call = ScriptCall::new("Redlock undo", &scripts().release, &lock, &args);
        let outcomes = core
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
