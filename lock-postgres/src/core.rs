//! [`PgCore`]: what a backend, its held locks and its background tasks
//! share — the pool, the config, the statements, the sessions and the
//! LISTEN connection — and running one statement with a time limit.
//!
//! Every module that talks to the database takes its state from here.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use lock_core::backend::Leaving;
use lock_core::LockError;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use crate::config::PgConfig;
use crate::errors::{db_error, pool_error, unavailable};
use crate::listen::Listener;
use crate::session::Sessions;
use crate::statements::Statements;

/// One statement parameter with its type (`query_typed`'s shape).
pub(crate) type Param<'a> = (&'a (dyn ToSql + Sync), Type);

/// The state of one backend, behind an `Arc`.
pub(crate) struct PgCore {
    pub(crate) pool: Pool,
    pub(crate) config: PgConfig,
    pub(crate) sql: Statements,
    /// One session per ttl in use.
    pub(crate) sessions: Sessions,
    /// The connection waiters LISTEN on.
    pub(crate) listener: Arc<Listener>,
    /// Withdrawals of abandoned acquisitions under way, per line (see
    /// [`crate::acquire::line_of`]): the next attempt on a line waits for
    /// them.
    pub(crate) leaving: Arc<Leaving>,
}

impl PgCore {
    /// The state of a backend on `pool`.
    pub(crate) fn new(pool: Pool, config: PgConfig) -> Self {
        Self {
            sql: Statements::new(&config.schema),
            listener: Arc::new(Listener::new(config.listen_config().clone())),
            sessions: Sessions::default(),
            leaving: Arc::default(),
            pool,
            config,
        }
    }

    /// Runs `sql` with `params` on a pooled connection, as an unnamed
    /// statement (no named prepared statement: pooler-safe), within
    /// `response_timeout` (waiting for a free connection included).
    ///
    /// A statement that timed out may still run on the server: callers
    /// whose statement creates something clean it up by owner.
    pub(crate) async fn query(
        &self,
        what: &str,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<Row>, LockError> {
        let work = async {
            let client = self.pool.get().await.map_err(pool_error)?;
            client
                .query_typed(sql, params)
                .await
                .map_err(|e| db_error(what, e))
        };
        match tokio::time::timeout(self.config.response_timeout, work).await {
            Ok(result) => result,
            Err(elapsed) => Err(unavailable(what, elapsed)),
        }
    }

    /// A pooled connection of its own, for statements that must run in
    /// order on one connection (see [`query_on`](Self::query_on)).
    pub(crate) async fn connection(&self) -> Result<Object, LockError> {
        match tokio::time::timeout(self.config.response_timeout, self.pool.get()).await {
            Ok(got) => got.map_err(pool_error),
            Err(elapsed) => Err(unavailable("no PostgreSQL connection available", elapsed)),
        }
    }

    /// Like [`query`](Self::query), on `client`: statements sent on one
    /// connection run in the order they were sent, even when the future
    /// of an earlier one was dropped after sending it.
    pub(crate) async fn query_on(
        &self,
        client: &Object,
        what: &str,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<Row>, LockError> {
        let work = client.query_typed(sql, params);
        match tokio::time::timeout(self.config.response_timeout, work).await {
            Ok(result) => result.map_err(|e| db_error(what, e)),
            Err(elapsed) => Err(unavailable(what, elapsed)),
        }
    }

    /// Like [`query`](Self::query), for a statement returning one row.
    pub(crate) async fn query_one(
        &self,
        what: &str,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Row, LockError> {
        self.query(what, sql, params)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| LockError::backend(what, "the statement returned no row"))
    }

    /// How often a waiter looks at its queue even without a notification:
    /// a third of `ttl`, at most 5 s, at least 50 ms.
    pub(crate) fn recheck_interval(ttl: Duration) -> Duration {
        (ttl / 3).clamp(Duration::from_millis(50), Duration::from_secs(5))
    }
}

/// Nothing uses the backend's sessions any more (every held lock and
/// watch is gone with it): their rows are deleted in the background, with
/// any entries left in them, notifying the keys, rather than
/// left to expire.
impl Drop for PgCore {
    fn drop(&mut self) {
        let ids = self.sessions.close();
        if ids.is_empty() {
            return;
        }
        let pool = self.pool.clone();
        let sql = std::mem::take(&mut self.sql.close_sessions);
        let timeout = self.config.response_timeout;
        lock_core::backend::spawn_detached(None, async move {
            let close = async {
                let client = pool.get().await.map_err(pool_error)?;
                client
                    .query_typed(&sql, &[(&ids, Type::INT8_ARRAY)])
                    .await
                    .map_err(|e| db_error("cannot close the sessions", e))
            };
            match tokio::time::timeout(timeout, close).await {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    tracing::debug!(%error, "distlock: the sessions stay until they expire")
                }
                Err(_) => tracing::debug!("distlock: the sessions stay until they expire"),
            }
        });
    }
}

impl fmt::Debug for PgCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgCore")
            .field("config", &self.config)
            .field("sessions", &self.sessions)
            .finish_non_exhaustive()
    }
}
