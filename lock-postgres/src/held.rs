//! A held lock: our entry at the head of its key's queue, in the
//! locker's session.
//!
//! The session keeps the entry alive ([`Renewal::Managed`]): there is
//! nothing to renew per lock, and its renewal reports both the session's
//! loss and the entry's removal (see [`crate::session`]). Release deletes
//! the entry and notifies the key's channel in one statement.
//!
//! [`Renewal::Managed`]: lock_core::backend::Renewal::Managed

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lock_core::backend::{spawn_detached, AcquireRequest, Backoff, HeldLock};
use lock_core::{LockError, LossReason};
use tokio_postgres::types::Type;

use crate::core::PgCore;
use crate::session::Session;

/// The holder's side of a lock: checks, releases, and sets its value.
pub(crate) struct HeldEntry {
    core: Arc<PgCore>,
    session: Arc<Session>,
    /// Our entry's id: the fencing token.
    id: i64,
    /// The lock key, for errors.
    name: String,
}

impl HeldEntry {
    /// Holds entry `id` of `session`, granted for `request`.
    pub(crate) fn new(
        core: &Arc<PgCore>,
        session: Arc<Session>,
        id: i64,
        request: &AcquireRequest,
    ) -> Self {
        Self {
            core: Arc::clone(core),
            session,
            id,
            name: request.name.key().to_string(),
        }
    }

    fn lost(&self, reason: LossReason) -> LockError {
        LockError::lost(self.name.clone(), reason)
    }

    fn ids(&self) -> [crate::core::Param<'_>; 2] {
        [(&self.id, Type::INT8), (&self.session.id, Type::INT8)]
    }
}

#[async_trait]
impl HeldLock for HeldEntry {
    /// Checks that our entry is still there in our live session (called
    /// by `LockGuard::extend`; the session renews by itself).
    async fn renew(&self, _ttl: Duration) -> Result<(), LockError> {
        if self.session.is_lost() {
            return Err(self.lost(LossReason::SessionExpired));
        }
        let row = self
            .core
            .query_one("cannot check the lock", &self.core.sql.check, &self.ids())
            .await?;
        match row.get::<_, bool>(0) {
            true => Ok(()),
            false => Err(self.lost(LossReason::TakenAway)),
        }
    }

    /// Deletes our entry and notifies the key's channel (the waiter right
    /// behind us wakes), in one statement. An entry already gone, or a
    /// session no longer live, means the lock was lost before.
    ///
    /// If the server stays unavailable past `response_timeout`, this
    /// returns [`LockError::Unavailable`] and keeps trying in the
    /// background until the delete goes through or the session ends: the
    /// session would otherwise keep the entry, and the lock, alive.
    async fn release(&self) -> Result<(), LockError> {
        self.session.unregister(self.id);
        match release_entry(&self.core, self.id, self.session.id).await {
            Ok((1, true)) => Ok(()),
            Ok((_, live)) => Err(self.lost(match live {
                true => LossReason::TakenAway,
                false => LossReason::SessionExpired,
            })),
            Err(error) if error.is_retriable() => {
                let (core, session, id) =
                    (Arc::clone(&self.core), Arc::clone(&self.session), self.id);
                spawn_detached(None, release_in_background(core, session, id));
                Err(error)
            }
            Err(error) => Err(error),
        }
    }

    /// Replaces our entry's value if it is still ours, notifying the key.
    async fn set_value(&self, value: &str) -> Result<(), LockError> {
        let [id, session] = self.ids();
        let rows = self
            .core
            .query_one(
                "cannot set the lock's value",
                &self.core.sql.set_value,
                &[id, session, (&value, Type::TEXT)],
            )
            .await?;
        match rows.get::<_, i64>(0) {
            0 => Err(self.lost(LossReason::TakenAway)),
            _ => Ok(()),
        }
    }

    /// The session's validity: its last confirmed renewal's send time plus
    /// the ttl, minus the drift margin.
    fn valid_until(&self) -> Option<Instant> {
        Some(self.session.valid_until())
    }
}

/// Runs the release statement: (entries deleted, session live).
async fn release_entry(core: &PgCore, id: i64, session: i64) -> Result<(i64, bool), LockError> {
    let row = core
        .query_one(
            "cannot release the lock",
            &core.sql.release,
            &[(&id, Type::INT8), (&session, Type::INT8)],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// Retries a release until it goes through or the session is lost.
async fn release_in_background(core: Arc<PgCore>, session: Arc<Session>, id: i64) {
    let mut delays = Backoff::exponential(Duration::from_millis(100), Duration::from_secs(2))
        .with_jitter()
        .delays();
    while !session.is_lost() {
        tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(2))).await;
        match release_entry(&core, id, session.id).await {
            Err(error) if error.is_retriable() => continue,
            _ => return,
        }
    }
}

impl fmt::Debug for HeldEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldEntry")
            .field("id", &self.id)
            .field("session", &self.session.id)
            .field("key", &self.name)
            .finish()
    }
}
