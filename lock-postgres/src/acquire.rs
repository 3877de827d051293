//! Acquiring a lock, a read lock or a permit: one entry row in the key's
//! queue.
//!
//! The acquire statement (the schema's `enqueue` function) inserts our
//! entry in the locker's session and answers in the same round trip
//! "granted" or "the id I wait behind" (for a lock, the live lock entry
//! right before ours; for a read lock, the newest older exclusive one;
//! for a permit, the newest older permit while the limit is reached).
//! Granted: the hold is ours after one round trip; its entry id is the
//! fencing token. Otherwise, for a try, the entry is withdrawn; for a
//! wait, we LISTEN on the key's channel, check the queue again (a release
//! may have come before the LISTEN), and then wait for the entry we wait
//! behind to go (a permit: for any older permit to go) — woken by its
//! release's NOTIFY — or for the bounded
//! re-check (at most ttl/3), which also removes expired sessions (a
//! crashed holder's), notifying their keys.
//!
//! Cancel-safe: until the lock is handed over, a guard deletes the
//! acquisition's entries by owner id in the background when the future is
//! dropped (this also covers a reply lost after the insert committed).
//! While the acquire statement may be in flight, the deletion is sent on
//! the same connection, behind it: sent on another, it could run first
//! and find nothing, and the entry would then live as long as the session.

use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::Object;
use lock_core::backend::{AcquireRequest, Acquired, CleanupOnDrop, Pending, Renewal};
use lock_core::{FencingToken, HoldKind, LockError};
use tokio_postgres::types::Type;

use crate::channel::channel;
use crate::core::PgCore;
use crate::held::HeldEntry;
use crate::listen::{Subscription, WokenBy};
use crate::session::Session;
use crate::statements::entry_kind;

/// How an entry's wait ended.
enum Turn {
    /// Our entry is the oldest live one: the lock is ours.
    Granted,
    /// Our entry or our session is gone: enqueue again.
    Requeue,
    /// The caller's deadline passed first.
    TimedOut,
}

/// Takes the lock of `request`; see the module docs. `Ok(None)` when a
/// try finds it held or a wait reaches its deadline.
pub(crate) async fn acquire(
    core: &Arc<PgCore>,
    request: &AcquireRequest,
) -> Result<Option<Acquired>, LockError> {
    let started = Instant::now();
    let mut requeues = 0u32;
    loop {
        if requeues > 0 {
            // Our session keeps vanishing: do not hammer the server.
            tokio::time::sleep(Duration::from_millis(10) * requeues.min(50)).await;
        }
        requeues += 1;
        let session = core.sessions.session(core, request.ttl).await?;
        // This backend's own abandoned request on the line (a writer
        // that gave up) must not hold this one back.
        let line = line_of(request);
        core.leaving
            .settled(&line, core.config.response_timeout)
            .await;
        // Dropped while the acquire statement may be on its way: withdraw
        // on the same connection, so the withdrawal runs after it.
        let connection = Arc::new(core.connection().await?);
        let in_flight = withdraw_on_drop(core, Some(&connection), &session, request, &line);
        let enqueued = enqueue(core, &connection, &session, request).await?;
        drop(connection);
        in_flight.disarm();
        let cleanup = withdraw_on_drop(core, None, &session, request, &line);
        let Some((id, ahead)) = enqueued else {
            // The server expired our session before we noticed.
            session.lose();
            cleanup.disarm();
            continue;
        };
        let turn = match ahead {
            None => Turn::Granted,
            Some(_) if !request.wait.may_wait() => Turn::TimedOut,
            Some(_) => wait_turn(core, &session, request, id).await?,
        };
        match turn {
            Turn::Granted if session.register(id, request.loss.clone()) => {
                cleanup.disarm();
                let held = HeldEntry::new(core, session, id, request);
                return Ok(Some(Acquired {
                    token: FencingToken::new(u64::try_from(id).unwrap_or(0)),
                    requested_at: started,
                    renewal: Renewal::Managed,
                    held: Box::new(held),
                }));
            }
            // Granted in a session that has just been lost: not ours.
            Turn::Granted | Turn::Requeue => drop(cleanup),
            Turn::TimedOut => {
                // Armed until the withdrawal is answered: dropped while
                // it runs (at the caller's deadline), it withdraws again.
                withdraw(core, &session, request).await?;
                cleanup.disarm();
                return Ok(None);
            }
        }
    }
}

/// Runs the acquire statement: our entry's id and the id of the live
/// entry it waits behind (`None`: granted), or `None` if the session is
/// not live on the server. A permit asked under another limit than its
/// semaphore's live permits is [`LockError::LimitMismatch`].
async fn enqueue(
    core: &PgCore,
    connection: &Object,
    session: &Session,
    request: &AcquireRequest,
) -> Result<Option<(i64, Option<i64>)>, LockError> {
    let what = "cannot queue for the lock";
    let (kind, limit) = entry_kind(request.kind);
    let rows = core
        .query_on(
            connection,
            what,
            &core.sql.enqueue,
            &[
                (&session.id, Type::INT8),
                (&request.name.namespace().as_str(), Type::TEXT),
                (&request.name.key().as_str(), Type::TEXT),
                (&kind, Type::TEXT),
                (&limit, Type::INT4),
                (&request.owner.as_str(), Type::TEXT),
                (&request.value.as_str(), Type::TEXT),
            ],
        )
        .await?;
    let row = rows
        .first()
        .ok_or_else(|| LockError::backend(what, "the statement returned no row"))?;
    if let Some(stored) = row.get::<_, Option<i32>>(2) {
        return Err(LockError::LimitMismatch {
            key: request.name.key().to_string(),
            stored: u32::try_from(stored).unwrap_or(0),
            asked: limit.and_then(|l| u32::try_from(l).ok()).unwrap_or(0),
        });
    }
    let id: Option<i64> = row.get(0);
    Ok(id.map(|id| (id, row.get(1))))
}

/// Waits until our entry `id` is granted, lost, or the deadline passes.
async fn wait_turn(
    core: &Arc<PgCore>,
    session: &Session,
    request: &AcquireRequest,
    id: i64,
) -> Result<Turn, LockError> {
    let channel = channel(&core.config.schema, &request.name);
    // A permit is let in by any older permit going, not one entry's.
    let woken_by = match request.kind {
        HoldKind::Permit { .. } => WokenBy::AnyOlder,
        _ => WokenBy::EntryAhead,
    };
    let subscription = core.listener.subscribe(channel, id, woken_by).await?;
    let interval = PgCore::recheck_interval(request.ttl);
    // The entry waited behind when the re-check timer fired unwoken.
    let mut unheard = None;
    // The entry waited behind was the oldest live lock entry at the last
    // check: its deletion puts ours first (see below).
    let mut behind_alone = false;
    loop {
        // Notifications come in commit order: the entry we waited behind,
        // alone ahead of every other lock entry of the key at our last
        // check, is gone, and ours was not deleted before it (no older
        // entry can appear: entries are numbered in turn). First in line
        // with no round trip; our session's liveness is checked when the
        // hold is registered.
        if behind_alone && subscription.waiter.behind_gone() {
            return Ok(Turn::Granted);
        }
        subscription.relisten().await?;
        subscription.waiter.start_check();
        let Some(checked) = check(core, session, request, id).await? else {
            return Ok(Turn::Requeue);
        };
        let ahead = checked.ahead;
        behind_alone = woken_by == WokenBy::EntryAhead && checked.ahead_alone;
        note_missed(core, &subscription, unheard.take(), ahead, interval);
        let Some(ahead) = ahead else {
            return Ok(Turn::Granted);
        };
        if subscription.waiter.wait_behind(ahead) {
            continue;
        }
        let now = Instant::now();
        let until = match request.wait.deadline() {
            Some(deadline) if deadline <= now => return Ok(Turn::TimedOut),
            Some(deadline) => deadline.min(now + interval),
            None => now + interval,
        };
        tokio::select! {
            () = subscription.waiter.woken() => {}
            () = tokio::time::sleep_until(until.into()) => {
                // At the caller's deadline, withdraw at once (the caller
                // drops this call then): no round trip before it.
                if request.wait.deadline().is_some_and(|d| d <= Instant::now()) {
                    return Ok(Turn::TimedOut);
                }
                unheard = subscription.waiter.behind_unheard();
                reap(core).await;
            }
        }
    }
}

/// What a check of our entry found.
struct Checked {
    /// The live entry ours waits behind; `None`: ours holds.
    ahead: Option<i64>,
    /// That entry is the oldest live lock entry of the key.
    ahead_alone: bool,
}

/// Checks our entry `id`: `None` if it or our session is gone.
async fn check(
    core: &PgCore,
    session: &Session,
    request: &AcquireRequest,
    id: i64,
) -> Result<Option<Checked>, LockError> {
    let (namespace, key) = (
        request.name.namespace().as_str(),
        request.name.key().as_str(),
    );
    let row = core
        .query_one(
            "cannot check the lock queue",
            &core.sql.recheck,
            &[
                (&namespace, Type::TEXT),
                (&key, Type::TEXT),
                (&id, Type::INT8),
                (&session.id, Type::INT8),
            ],
        )
        .await?;
    Ok(row.get::<_, bool>(0).then(|| Checked {
        ahead: row.get(1),
        ahead_alone: row.get(2),
    }))
}

/// After a re-check the timer brought (the waiter waiting behind
/// `unheard`, whose notification had not come): if that entry is gone now
/// (`ahead` is another or none) and its notification still has not come,
/// the listener hears of a missed notification.
fn note_missed(
    core: &PgCore,
    subscription: &Subscription,
    unheard: Option<i64>,
    ahead: Option<i64>,
    interval: Duration,
) {
    let Some(gone) = unheard.filter(|&id| ahead != Some(id)) else {
        return;
    };
    if subscription.waiter.behind_unheard() == Some(gone) {
        core.listener.missed_notification(interval);
    }
}

/// Removes expired sessions and their entries, notifying their keys; a
/// failure is only logged (the next re-check tries again).
pub(crate) async fn reap(core: &PgCore) {
    if let Err(error) = core
        .query("cannot remove expired sessions", &core.sql.reap, &[])
        .await
    {
        tracing::debug!(%error, "distlock: expired sessions stay until the next re-check");
    }
}

/// Deletes this acquisition's entries (by owner id) in `session`.
async fn withdraw(
    core: &PgCore,
    session: &Session,
    request: &AcquireRequest,
) -> Result<(), LockError> {
    core.query(
        "cannot leave the lock queue",
        &core.sql.withdraw,
        &[
            (&request.owner.as_str(), Type::TEXT),
            (&session.id, Type::INT8),
        ],
    )
    .await
    .map(drop)
}

/// The line an acquisition of `request` queues in, as [`PgCore::leaving`]
/// counts withdrawals: a key's lock, or its semaphore.
pub(crate) fn line_of(request: &AcquireRequest) -> String {
    let line = match request.kind {
        HoldKind::Permit { .. } => "permits",
        _ => "lock",
    };
    format!("{line}:{}", request.name)
}

/// A guard that withdraws this acquisition's entries when dropped armed:
/// on `connection` when given (after whatever was sent on it), else on
/// any pooled connection. The withdrawal counts as under way on `line`
/// from the drop until it is answered.
fn withdraw_on_drop(
    core: &Arc<PgCore>,
    connection: Option<&Arc<Object>>,
    session: &Session,
    request: &AcquireRequest,
    line: &str,
) -> CleanupOnDrop {
    let core = Arc::clone(core);
    let connection = connection.map(Arc::clone);
    let session = session.id;
    let owner = request.owner.as_str().to_owned();
    let line = line.to_owned();
    CleanupOnDrop::new(move || {
        // Counted at the drop itself, before the next attempt can look.
        let under_way = core.leaving.start(&line);
        withdraw_abandoned(core, connection, session, owner, under_way)
    })
}

/// Withdraws the entries of the abandoned acquisition of `owner` in
/// `session` (see [`withdraw_on_drop`]); `_under_way` ends when answered.
async fn withdraw_abandoned(
    core: Arc<PgCore>,
    connection: Option<Arc<Object>>,
    session: i64,
    owner: String,
    _under_way: Pending,
) {
    let params: [crate::core::Param<'_>; 2] = [(&owner, Type::TEXT), (&session, Type::INT8)];
    let (what, sql) = ("cannot leave the lock queue", &core.sql.withdraw);
    let withdrawn = match &connection {
        Some(connection) => core.query_on(connection, what, sql, &params).await,
        None => core.query(what, sql, &params).await,
    };
    if let Err(error) = withdrawn {
        tracing::warn!(%error, "distlock: a cancelled request's entry stays until its session ends");
    }
}
