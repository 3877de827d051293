//! [`RedlockBackend`]: Redlock over N independent Redis masters.
//!
//! An acquire runs the acquire script on every master in parallel (each
//! bounded by the response timeout) and succeeds when a majority granted
//! the lock while the lease is still valid (ttl − elapsed − drift > 0).
//! Partial acquisitions are undone with owner-checked deletes.
//!
//! Fencing tokens: each master counts on its own, so the acquirer takes
//! the largest counter value `M` of the masters that granted it, then
//! raises the counter of every master that answered to at least `M` (and
//! stamps `M` into its lock value) before it reports success; at least a
//! majority must confirm. When every master granted with the same value
//! (the masters are in step, as they are unless one missed a round) the
//! raise would change nothing and is skipped. Any later holder's majority shares a master with
//! that confirmed majority, whose counter was raised before the later
//! holder could take the lock there, so the later token is larger. This
//! holds while a master that restarts keeps its counters (AOF with
//! `appendfsync always`); see the crate docs.
//!
//! This module holds the backend; `core` the state its parts share and
//! the calls on every master, `round` runs one acquire round and undoes
//! partial ones, `held` renews and releases a held lock, `watch` follows
//! the holder a majority agrees on.

mod core;
mod held;
mod round;
mod watch;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::join_all;
use lock_core::backend::Capability::{
    Expiry, ForceRelease, NamespacedKeys, NotifiedWakeups, PerLockExpiry, Remote,
};
use lock_core::backend::{
    acquire_with_retries, holder_stream, AcquireRequest, Acquired, Attempt, Backend, Backoff,
    Capabilities, HolderStream, TryAcquire, WakeSubscription,
};
use lock_core::{LockError, LockInfo, LockName, Namespace};

use crate::config::RedisConfig;
use crate::conn::{Conn, ScriptCall};
use crate::deadline::Timeouts;
use crate::pubsub::{Listener, Listening};
use crate::purge::purge;
use crate::renewal::Renewer;
use crate::scripts::scripts;

use self::core::RedlockCore;
use held::RedlockTarget;
use round::attempt;
use watch::RedlockWatch;

/// Locks held by a majority of independent masters (`redlock://`).
#[derive(Clone)]
pub struct RedlockBackend {
    core: Arc<RedlockCore>,
}

impl RedlockBackend {
    /// Connects to the masters `config` names (each host an independent
    /// master); at least a majority must answer, else
    /// [`LockError::Unavailable`].
    pub(crate) async fn connect(config: RedisConfig) -> Result<Self, LockError> {
        let timeouts = Timeouts::new(&config);
        let nodes = config
            .nodes
            .iter()
            .map(|node| Ok(Conn::single(config.connection_manager(node)?, node)))
            .collect::<Result<Vec<_>, _>>()?;
        let quorum = config.quorum();
        let ping = redis::cmd("PING");
        let pings = config.nodes.iter().zip(&nodes).map(|(node, c)| {
            let what = format!("connect to Redis at {node}");
            let ping = &ping;
            async move { c.query::<String>(timeouts, &what, ping).await }
        });
        let pinged = join_all(pings).await;
        let answered = pinged.iter().filter(|ping| ping.is_ok()).count();
        if answered < quorum {
            return Err(too_few_masters(&config, pinged, quorum).await);
        }
        join_all(nodes.iter().map(|node| node.preload_scripts(timeouts))).await;
        let listener = Listener::new(&config, &config.nodes)?;
        let renewer = Renewer::start(RedlockTarget {
            nodes: nodes.clone(),
            timeouts,
            quorum,
        });
        Ok(Self {
            core: Arc::new(RedlockCore {
                nodes,
                timeouts,
                quorum,
                listener,
                renewer,
                config,
            }),
        })
    }
}

#[async_trait]
impl Backend for RedlockBackend {
    fn name(&self) -> &'static str {
        "redlock"
    }

    fn capabilities(&self) -> Capabilities {
        // No `fifo`: a Redlock waiter is not queued on the masters. No
        // `watch_every_change`: a watch reads the majority view again on
        // any master's message, so quick changes may be merged.
        Capabilities::of(&[
            NamespacedKeys,
            Expiry,
            PerLockExpiry,
            ForceRelease,
            NotifiedWakeups,
            Remote,
        ])
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Option<Acquired>, LockError> {
        acquire_with_retries(self, request).await
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<LockInfo>, LockError> {
        self.core.holder(name).await
    }

    fn watch(&self, name: &LockName) -> HolderStream {
        holder_stream(RedlockWatch::new(Arc::clone(&self.core), name.clone()))
    }

    async fn force_release(&self, name: &LockName) -> Result<bool, LockError> {
        let keys = self.core.keys(name);
        let removed: Vec<i64> = self
            .core
            .on_all(&ScriptCall::new(
                "force release",
                &scripts().force_release,
                &keys.watched_lock(),
                &[&keys.channel()],
            ))
            .await?;
        Ok(removed.contains(&1))
    }

    /// Purges every master; fails unless every master answered (one that
    /// did not keeps the namespace's keys there: run it again).
    async fn purge_namespace(&self, namespace: &Namespace) -> Result<(), LockError> {
        let core = &self.core;
        let outcomes = join_all(
            core.nodes
                .iter()
                .map(|node| purge(node, core.timeouts, namespace)),
        )
        .await;
        let n = outcomes.len();
        let failed: Vec<LockError> = outcomes.into_iter().filter_map(Result::err).collect();
        match failed.first() {
            None => Ok(()),
            Some(first) => Err(LockError::Unavailable {
                message: format!(
                    "Redlock: purging namespace `{namespace}` failed on {} of {n} masters, \
                     which keep its keys (run it again): {first}",
                    failed.len()
                ),
                source: None,
            }),
        }
    }
}

#[async_trait]
impl TryAcquire for RedlockBackend {
    async fn watch_releases(&self, name: &LockName) -> Result<WakeSubscription, LockError> {
        Ok(self.core.listener.watch(self.core.keys(name).channel()))
    }

    async fn try_acquire_once(&self, request: &AcquireRequest) -> Result<Attempt, LockError> {
        let keys = self.core.keys(&request.name);
        let first = attempt(&self.core, &keys, request).await?;
        if matches!(first, Attempt::Acquired(_)) || !request.wait.may_wait() {
            return Ok(first);
        }
        match self.core.listener.ensure_listening(keys.channel()).await {
            Listening::Now => attempt(&self.core, &keys, request).await,
            Listening::Already => Ok(first),
            Listening::Unavailable => Ok(Attempt::Held {
                retry_after: Some(Duration::from_millis(100)),
            }),
        }
    }

    fn poll_policy(&self) -> Backoff {
        Backoff::exponential(Duration::from_millis(100), Duration::from_secs(1)).with_jitter()
    }
}

impl fmt::Debug for RedlockBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockBackend")
            .field("config", &self.core.config)
            .field("quorum", &self.core.quorum)
            .finish()
    }
}

/// The error for a Redlock whose masters' `PING`s (`pinged`, one per
/// master in URL order) fell short of `quorum`: refused credentials as
/// they are, else what failed with the masters that did not answer,
/// diagnosed.
async fn too_few_masters(
    config: &RedisConfig,
    pinged: Vec<Result<String, LockError>>,
    quorum: usize,
) -> LockError {
    let total = pinged.len();
    let mut answered = 0;
    let mut failed = Vec::new();
    let mut first_error = None;
    for (node, ping) in config.nodes.iter().zip(pinged) {
        match ping {
            Ok(_) => answered += 1,
            Err(error @ (LockError::PermissionDenied { .. } | LockError::InvalidConfig { .. })) => {
                return error
            }
            Err(error) => {
                failed.push(node.clone());
                first_error.get_or_insert(error);
            }
        }
    }
    let Some(error) = first_error else {
        return LockError::invalid_config("a Redlock URL names its masters");
    };
    let protocol = crate::diagnosis::protocol(config);
    let explained = crate::diagnosis::explain(config, protocol, &failed, error).await;
    let message = format!(
        "only {answered} of {total} Redlock masters answered, {quorum} needed: {}",
        crate::diagnosis::detail(&explained)
    );
    match explained {
        LockError::InvalidConfig { .. } => LockError::invalid_config(message),
        _ => LockError::Unavailable {
            message,
            source: None,
        },
    }
}
