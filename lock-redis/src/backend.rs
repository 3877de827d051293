//! [`RedisBackend`]: locks on one Redis instance or a Redis Cluster.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use lock_core::backend::Capability::{PerLockExpiry, Remote, WatchEveryChange};
use lock_core::backend::{
    acquire_with_retries, holder_stream, AcquireRequest, Acquired, Backend, Capabilities,
    HolderStream, Primitive,
};
use lock_core::{LockError, LockInfo, LockName, Namespace};

use crate::config::{RedisConfig, Topology};
use crate::conn::{Conn, ScriptCall};
use crate::core::RedisCore;
use crate::counter::Counters;
use crate::deadline::Timeouts;
use crate::pubsub::{Listener, Target};
use crate::purge::purge;
use crate::queue::QueuedWait;
use crate::renewal::{ConnTarget, Renewer};
use crate::scripts::scripts;
use crate::shared::holders_of;
use crate::watch::RedisWatch;

/// Locks on one Redis instance (`redis://`), a Redis Cluster
/// (`redis+cluster://`) or the master Redis Sentinel names
/// (`redis+sentinel://`). See the crate docs for the guarantees.
#[derive(Clone)]
pub struct RedisBackend {
    core: Arc<RedisCore>,
}

impl RedisBackend {
    /// Connects through `conn` (one instance, a cluster or a sentinel's
    /// master, as `config` says) and checks that it answers. Fails with
    /// [`LockError::Unavailable`] if it does not, naming the host and why,
    /// [`LockError::InvalidConfig`] if the URL points at a server that is
    /// not Redis (or not TLS as the URL says), and
    /// [`LockError::PermissionDenied`] for refused credentials.
    pub(crate) async fn connect(conn: Conn, config: RedisConfig) -> Result<Self, LockError> {
        let timeouts = Timeouts::new(&config);
        let what = match &config.master_name {
            Some(name) => format!("connect to the Redis master `{name}` named by the sentinels"),
            None => format!("connect to Redis at {}", config.nodes[0]),
        };
        let pinged = conn
            .query::<String>(timeouts, &what, &redis::cmd("PING"))
            .await;
        if let Err(error) = pinged {
            // A sentinel's master was diagnosed when the sentinels named it.
            return Err(match conn {
                Conn::Sentinel(_) => error,
                _ => {
                    let protocol = crate::diagnosis::protocol(&config);
                    crate::diagnosis::explain(&config, protocol, &config.nodes, error).await
                }
            });
        }
        conn.preload_scripts(timeouts).await;
        // Classic PUBLISH reaches every node of a cluster, but a message
        // that crosses the cluster bus sometimes arrives ~40 ms late
        // (measured on loopback), while subscribers on the publishing node
        // get it at once. So listen on every node the URL names: with the
        // masters listed, each release is heard from its own node.
        let listener = match &conn {
            Conn::Sentinel(master) => Listener::on(&config, &[Target::Following(master.clone())])?,
            _ => Listener::new(&config, &config.nodes)?,
        };
        let counters = match &conn {
            Conn::Cluster(..) => Counters::PerSlot,
            _ => Counters::PerNamespace,
        };
        let renewer = Renewer::start(ConnTarget {
            conn: conn.clone(),
            timeouts,
        });
        Ok(Self {
            core: Arc::new(RedisCore {
                conn,
                timeouts,
                listener,
                renewer,
                leaving: Arc::default(),
                counters,
                config,
            }),
        })
    }
}

#[async_trait]
impl Backend for RedisBackend {
    fn name(&self) -> &'static str {
        match self.core.config.topology {
            Topology::Cluster => "redis-cluster",
            Topology::Sentinel => "redis-sentinel",
            _ => "redis",
        }
    }

    fn capabilities(&self) -> Capabilities {
        // Waiters queue on the server and are handed the lock in order
        // (see `queue`); read locks and permits wait in the same kind of
        // line (see `shared`). Every change of a watched lock is published
        // with its new state, in the server's order (see `watch`).
        Capabilities::QUEUEING_STORE.with(&[PerLockExpiry, Remote, WatchEveryChange])
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Option<Acquired>, LockError> {
        let wait = QueuedWait::new(&self.core, request);
        let outcome = acquire_with_retries(&wait, request).await;
        if matches!(outcome, Ok(Some(_))) {
            wait.succeeded();
        }
        outcome
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<LockInfo>, LockError> {
        // The exclusive holder, or the oldest reader.
        Ok(holders_of(&self.core, name, Primitive::Lock)
            .await?
            .into_iter()
            .next())
    }

    async fn holders(
        &self,
        name: &LockName,
        primitive: Primitive,
    ) -> Result<Vec<LockInfo>, LockError> {
        holders_of(&self.core, name, primitive).await
    }

    fn watch(&self, name: &LockName) -> HolderStream {
        holder_stream(RedisWatch::new(
            Arc::clone(&self.core),
            self.core.keys(name),
        ))
    }

    /// Removes the holds there are when it is called: the script removes
    /// only holds up to the highest token seen here, so a cluster client
    /// that sends the script again after a lost reply never removes the
    /// holder the first run handed the lock to.
    async fn force_release(&self, name: &LockName) -> Result<bool, LockError> {
        let seen = holders_of(&self.core, name, Primitive::Lock).await?;
        let Some(upto) = seen.iter().map(|h| h.token.get()).max() else {
            return Ok(false);
        };
        let keys = self.core.keys(name);
        let removed: i64 = self
            .core
            .conn
            .eval(
                self.core.timeouts,
                &ScriptCall::new(
                    "force release",
                    &scripts().release_queued,
                    &keys.with_readers(),
                    &[&upto, &"force"],
                ),
            )
            .await?;
        Ok(removed == 1)
    }

    async fn purge_namespace(&self, namespace: &Namespace) -> Result<(), LockError> {
        purge(&self.core.conn, self.core.timeouts, namespace).await?;
        Ok(())
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("config", &self.core.config)
            .finish()
    }
}
