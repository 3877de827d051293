//! Sessions: one `sessions` row per backend and ttl, renewed in the
//! background by **one** `UPDATE` every ttl/3 whatever the number of holds.
//!
//! The row expires on the server's clock (`expires_at`); the renewal
//! never revives an expired row (`WHERE expires_at > now()`). A session is
//! *lost* when a renewal updates no row, or when no renewal succeeded
//! before its deadline, counted from when the last successful renewal was
//! **sent** (minus lock-core's clock-drift margin), so this process gives
//! up no later than the server. Then every registered hold hears
//! [`LossReason::SessionExpired`] and the next acquire opens a new session.
//!
//! The renewal also lists the session's entries: a registered hold whose
//! entry is gone (force-released, purged) hears [`LossReason::TakenAway`].

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use lock_core::backend::{clock_drift, LossReporter};
use lock_core::{LockError, LossReason, OwnerId};
use tokio_postgres::types::Type;

use crate::core::PgCore;

/// The current session of one ttl; an async mutex, so concurrent first
/// acquires wait for one session to open.
type Slot = Arc<tokio::sync::Mutex<Option<Arc<Session>>>>;

/// The sessions of one backend, one per ttl (in milliseconds).
#[derive(Default)]
pub(crate) struct Sessions {
    by_ttl: Mutex<HashMap<u64, Slot>>,
}

impl Sessions {
    /// A live session for `ttl`, opened now if there is none.
    pub(crate) async fn session(
        &self,
        core: &Arc<PgCore>,
        ttl: Duration,
    ) -> Result<Arc<Session>, LockError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let slot = {
            let mut by_ttl = self.by_ttl.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(by_ttl.entry(ttl_ms).or_default())
        };
        let mut current = slot.lock().await;
        if let Some(session) = current.as_ref().filter(|s| !s.is_lost()) {
            return Ok(Arc::clone(session));
        }
        let session = Session::open(core, ttl).await?;
        *current = Some(Arc::clone(&session));
        Ok(session)
    }
}

impl Sessions {
    /// The ids of the sessions not known to be lost, marking them lost
    /// (for a backend being dropped: nothing renews them any more).
    pub(crate) fn close(&self) -> Vec<i64> {
        let by_ttl = self.by_ttl.lock().unwrap_or_else(|p| p.into_inner());
        let mut ids = Vec::new();
        for slot in by_ttl.values() {
            if let Ok(current) = slot.try_lock() {
                if let Some(session) = current.as_ref().filter(|s| !s.is_lost()) {
                    session.lost.store(true, Ordering::SeqCst);
                    ids.push(session.id);
                }
            }
        }
        ids
    }
}

impl fmt::Debug for Sessions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let by_ttl = self.by_ttl.lock().unwrap_or_else(|p| p.into_inner());
        let ttls: Vec<_> = by_ttl.keys().collect();
        f.debug_struct("Sessions").field("ttls_ms", &ttls).finish()
    }
}

/// One `sessions` row and the holds that live in it.
pub(crate) struct Session {
    /// The row's id.
    pub(crate) id: i64,
    ttl: Duration,
    /// Until when the row surely lives on the server, as this process
    /// last confirmed it (send time of the renewal + ttl − drift).
    valid_until: Mutex<Instant>,
    lost: AtomicBool,
    /// Held locks by entry id: their reporter, and when they were
    /// registered (a renewal sent before that cannot list them).
    holds: Mutex<HashMap<i64, (LossReporter, Instant)>>,
}

impl Session {
    /// Inserts a session row and starts renewing it.
    async fn open(core: &Arc<PgCore>, ttl: Duration) -> Result<Arc<Self>, LockError> {
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1);
        let owner = OwnerId::generate();
        let sent = Instant::now();
        let row = core
            .query_one(
                "cannot open a session",
                &core.sql.open_session,
                &[(&owner.as_str(), Type::TEXT), (&ttl_ms, Type::INT8)],
            )
            .await?;
        let session = Arc::new(Self {
            id: row.get(0),
            ttl,
            valid_until: Mutex::new(sent + ttl - clock_drift(ttl)),
            lost: AtomicBool::new(false),
            holds: Mutex::new(HashMap::new()),
        });
        tokio::spawn(renew_loop(Arc::downgrade(core), Arc::clone(&session)));
        Ok(session)
    }

    /// True once the session is known to be gone.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst) || Instant::now() >= self.valid_until()
    }

    /// Until when the session surely lives on the server.
    pub(crate) fn valid_until(&self) -> Instant {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reports the loss of entry `id`'s lock to `reporter` when the
    /// session goes. Returns false (registering nothing) if it has gone.
    pub(crate) fn register(&self, id: i64, reporter: LossReporter) -> bool {
        let mut holds = self.holds.lock().unwrap_or_else(|p| p.into_inner());
        if self.is_lost() {
            return false;
        }
        holds.insert(id, (reporter, Instant::now()));
        true
    }

    /// Forgets entry `id` (released).
    pub(crate) fn unregister(&self, id: i64) {
        let mut holds = self.holds.lock().unwrap_or_else(|p| p.into_inner());
        holds.remove(&id);
    }

    /// Marks the session lost and tells every hold.
    pub(crate) fn lose(&self) {
        self.lost.store(true, Ordering::SeqCst);
        let holds = std::mem::take(&mut *self.holds.lock().unwrap_or_else(|p| p.into_inner()));
        for (reporter, _) in holds.into_values() {
            reporter.report(LossReason::SessionExpired);
        }
    }

    /// After a renewal sent at `sent` succeeded listing `entries`: extends
    /// the validity, and reports holds registered before `sent` whose
    /// entry is not listed as taken away.
    fn renewed(&self, sent: Instant, entries: &[i64]) {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner()) =
            sent + self.ttl - clock_drift(self.ttl);
        let mut holds = self.holds.lock().unwrap_or_else(|p| p.into_inner());
        holds.retain(|id, (reporter, registered)| {
            if reporter.is_abandoned() {
                return false;
            }
            if *registered < sent && !entries.contains(id) {
                reporter.report(LossReason::TakenAway);
                return false;
            }
            true
        });
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("ttl", &self.ttl)
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

/// Renews `session` every ttl/3 until it is lost or the backend is gone.
async fn renew_loop(core: Weak<PgCore>, session: Arc<Session>) {
    let interval = session.ttl / 3;
    let mut pause = interval;
    loop {
        tokio::time::sleep(pause).await;
        pause = interval;
        let Some(core) = core.upgrade() else { return };
        if session.lost.load(Ordering::SeqCst) {
            return;
        }
        let sent = Instant::now();
        let renewal = core
            .query_one(
                "cannot renew the session",
                &core.sql.renew,
                &[(&session.id, Type::INT8)],
            )
            .await;
        match renewal {
            Ok(row) if row.get::<_, bool>(0) => {
                let entries: Vec<i64> = row.get(1);
                session.renewed(sent, &entries);
            }
            Ok(_) => {
                tracing::warn!(
                    session = session.id,
                    "distlock: session expired on the server"
                );
                session.lose();
                return;
            }
            Err(error) => {
                tracing::warn!(%error, "distlock: session renewal failed; retrying");
                pause = interval / 4;
                if Instant::now() >= session.valid_until() {
                    session.lose();
                    return;
                }
            }
        }
    }
}
