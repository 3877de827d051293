//! [`PgBackend`]: the `Backend` implementation.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::Capability::Remote;
use lock_core::backend::{
    holder_stream, spawn_detached, AcquireRequest, Acquired, Backend, Capabilities, Change,
    HolderSource, HolderStream, Primitive,
};
use lock_core::{FencingToken, HoldKind, LockError, LockInfo, LockName, Namespace};
use tokio_postgres::types::Type;
use tokio_postgres::Row;

use crate::acquire::{acquire, reap};
use crate::channel::channel;
use crate::config::PgConfig;
use crate::core::PgCore;
use crate::errors::pool_error;
use crate::listen::{Subscription, WokenBy, WATCHER};
use crate::session::Session;
use crate::statements::{EXCLUSIVE, PERMIT, READ};
use crate::{connect, diagnosis, schema};

/// Locks in a PostgreSQL database. See the crate docs for the layout and
/// its guarantees.
///
/// One backend owns a pool of connections, one LISTEN connection (opened
/// on the first wait) and one session row per ttl in use.
pub struct PgBackend {
    core: Arc<PgCore>,
}

impl PgBackend {
    /// Connects to the database `config` describes and makes sure the
    /// store's tables exist (creating them unless `create_schema=false`).
    ///
    /// Errors: an unreachable server is [`LockError::Unavailable`] naming
    /// the host, what failed and what to try (a port where no server
    /// listens, or another kind of server, is told apart);
    /// refused credentials [`LockError::PermissionDenied`]; a missing
    /// table with `create_schema=false`, a newer layout or an unsupported
    /// `sslmode` [`LockError::InvalidConfig`].
    pub async fn connect(config: PgConfig) -> Result<Self, LockError> {
        let pool = connect::pool(&config)?;
        let client = match pool.get().await {
            Ok(client) => client,
            Err(error) => return Err(diagnosis::explain(&config, pool_error(error)).await),
        };
        schema::ensure(&client, &config.schema, config.create_schema).await?;
        drop(client);
        Ok(Self {
            core: Arc::new(PgCore::new(pool, config)),
        })
    }

    /// The configuration this backend was opened with.
    pub fn config(&self) -> &PgConfig {
        &self.core.config
    }

    /// A statement whose answer is one count (`int8`).
    async fn count(&self, what: &str, sql: &str, name: &LockName) -> Result<i64, LockError> {
        let (namespace, key) = (name.namespace().as_str(), name.key().as_str());
        let row = self
            .core
            .query_one(what, sql, &[(&namespace, Type::TEXT), (&key, Type::TEXT)])
            .await?;
        Ok(row.get(0))
    }
}

/// The granted entry of `name`, if any.
/// The granted holders of `name`'s lock or semaphore, oldest first.
async fn holders(
    core: &PgCore,
    name: &LockName,
    primitive: Primitive,
) -> Result<Vec<LockInfo>, LockError> {
    let (namespace, key) = (name.namespace().as_str(), name.key().as_str());
    let kinds: &[&str] = match primitive {
        Primitive::Lock => &[EXCLUSIVE, READ],
        Primitive::Semaphore => &[PERMIT],
    };
    let rows = core
        .query(
            "cannot read the lock's holders",
            &core.sql.holders,
            &[
                (&namespace, Type::TEXT),
                (&key, Type::TEXT),
                (&kinds, Type::TEXT_ARRAY),
            ],
        )
        .await?;
    Ok(rows.iter().map(holder_info).collect())
}

/// One row of the `holders` statement, as a [`LockInfo`].
fn holder_info(row: &Row) -> LockInfo {
    let token = FencingToken::new(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0));
    let ttl_left = Duration::from_millis(u64::try_from(row.get::<_, i64>(3)).unwrap_or(0));
    let kind = match row.get::<_, &str>(4) {
        READ => HoldKind::Shared,
        PERMIT => HoldKind::Permit {
            limit: u32::try_from(row.get::<_, Option<i32>>(5).unwrap_or(0)).unwrap_or(0),
        },
        _ => HoldKind::Exclusive,
    };
    LockInfo::new(row.get::<_, String>(1), token, Some(ttl_left))
        .with_value(row.get::<_, String>(2))
        .with_kind(kind)
}

/// The lock's oldest holder, if any.
async fn holder(core: &PgCore, name: &LockName) -> Result<Option<LockInfo>, LockError> {
    Ok(holders(core, name, Primitive::Lock)
        .await?
        .into_iter()
        .next())
}

#[async_trait]
impl Backend for PgBackend {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        // Holds live as long as the session, not each on its own: no
        // `per_lock_expiry`.
        Capabilities::QUEUEING_STORE.with(&[Remote])
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Option<Acquired>, LockError> {
        acquire(&self.core, request).await
    }

    /// The oldest live entry of the key, with the time left on its session.
    async fn inspect(&self, name: &LockName) -> Result<Option<LockInfo>, LockError> {
        holder(&self.core, name).await
    }

    /// The granted entries of the lock (its exclusive holder or its
    /// readers) or of the semaphore, oldest first.
    async fn holders(
        &self,
        name: &LockName,
        primitive: Primitive,
    ) -> Result<Vec<LockInfo>, LockError> {
        holders(&self.core, name, primitive).await
    }

    /// Reads the holder, then again after every notification on the key's
    /// channel, and at least every second (an expiry publishes nothing
    /// until some client removes the session; the watch does it too).
    fn watch(&self, name: &LockName) -> HolderStream {
        holder_stream(Watch {
            core: Arc::clone(&self.core),
            name: name.clone(),
            subscription: None,
            signed_up: None,
        })
    }

    /// Deletes the lock's granted entries (its exclusive holder, or its
    /// readers; the waiters keep their places, and the next one is woken
    /// by the notification). The semaphore's permits are untouched.
    async fn force_release(&self, name: &LockName) -> Result<bool, LockError> {
        let sql = &self.core.sql.force_release;
        Ok(self.count("cannot remove the lock", sql, name).await? > 0)
    }

    /// Deletes every entry of the namespace, notifying each key. Sessions
    /// stay (they may hold locks in other namespaces); holders in the
    /// namespace hear `TakenAway` at their session's next renewal.
    async fn purge_namespace(&self, namespace: &Namespace) -> Result<(), LockError> {
        let namespace = namespace.as_str();
        self.core
            .query(
                "cannot remove the namespace",
                &self.core.sql.purge,
                &[(&namespace, Type::TEXT)],
            )
            .await
            .map(drop)
    }
}

/// A watch of one lock's holder through the LISTEN connection, signed up
/// as the key's watcher (acquires and releases notify only keys with a
/// waiter or a watcher).
struct Watch {
    core: Arc<PgCore>,
    name: LockName,
    subscription: Option<Subscription>,
    /// The watcher row and the session it lives in.
    signed_up: Option<(Arc<Session>, i64)>,
}

/// The ttl of the session watchers are signed up in (renewed with the
/// backend's other sessions; a watcher whose session ends signs up again
/// at its next read).
const WATCHER_TTL: Duration = Duration::from_secs(10);

impl Watch {
    /// Signs up as the key's watcher unless already signed up in a live
    /// session.
    async fn sign_up(&mut self) -> Result<(), LockError> {
        if self.signed_up.as_ref().is_some_and(|(s, _)| !s.is_lost()) {
            return Ok(());
        }
        let session = self.core.sessions.session(&self.core, WATCHER_TTL).await?;
        let (namespace, key) = (self.name.namespace().as_str(), self.name.key().as_str());
        let row = self
            .core
            .query_one(
                "cannot watch the lock",
                &self.core.sql.watch,
                &[
                    (&session.id, Type::INT8),
                    (&namespace, Type::TEXT),
                    (&key, Type::TEXT),
                ],
            )
            .await?;
        self.signed_up = Some((session, row.get(0)));
        Ok(())
    }
}

#[async_trait]
impl HolderSource for Watch {
    async fn read(&mut self) -> Result<Option<LockInfo>, LockError> {
        match &self.subscription {
            Some(subscription) => subscription.relisten().await?,
            None => {
                let channel = channel(&self.core.config.schema, &self.name);
                let subscription = self
                    .core
                    .listener
                    .subscribe(channel, WATCHER, WokenBy::AnyOlder)
                    .await?;
                self.subscription = Some(subscription);
            }
        }
        // Listening first, then signed up, then read: every change after
        // the read is notified to us.
        self.sign_up().await?;
        holder(&self.core, &self.name).await
    }

    async fn next_change(&mut self) -> Result<Change, LockError> {
        if let Some(subscription) = &self.subscription {
            let woken = subscription.waiter.woken();
            if tokio::time::timeout(Duration::from_secs(1), woken)
                .await
                .is_err()
            {
                reap(&self.core).await;
            }
        }
        Ok(Change::Reread)
    }
}

impl Drop for Watch {
    /// Signs the watcher off in the background.
    fn drop(&mut self) {
        let Some((_, id)) = self.signed_up.take() else {
            return;
        };
        let core = Arc::clone(&self.core);
        spawn_detached(None, async move {
            let sql = &core.sql.unwatch;
            if let Err(error) = core
                .query("cannot stop watching", sql, &[(&id, Type::INT8)])
                .await
            {
                tracing::debug!(%error, "distlock: a watcher row stays until its session ends");
            }
        });
    }
}

impl fmt::Debug for PgBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgBackend")
            .field("config", &self.core.config)
            .finish_non_exhaustive()
    }
}
