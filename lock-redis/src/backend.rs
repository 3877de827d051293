//! [`RedisBackend`]: locks on one Redis instance or a Redis Cluster.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lock_core::backend::Capability::{
    Expiry, Fifo, ForceRelease, NotifiedWakeups, PerLockExpiry, Remote,
};
use lock_core::backend::{
    acquire_with_retries, holder_stream, AcquireRequest, Acquired, Attempt, Backend, Capabilities,
    CleanupOnDrop, HeldLock, HolderStream, Renewal,
};
use lock_core::{FencingToken, LockError, LockInfo, LockName};

use crate::config::{RedisConfig, Topology};
use crate::conn::{Conn, ScriptCall, Timeouts};
use crate::keys::LockKeys;
use crate::pubsub::Listener;
use crate::queue::{QueueMode, QueuedWait, WAITER_LIFE};
use crate::renewal::{ConnTarget, HeldKeys, RenewalStats, Renewer};
use crate::retry::CleanupRetry;
use crate::scripts::{parse_inspect, scripts, AcquireReply};
use crate::value::lock_info;
use crate::watch::RedisWatch;

/// Locks on one Redis instance (`redis://`) or a Redis Cluster
/// (`redis+cluster://`). See the crate docs for the guarantees.
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) conn: Conn,
    pub(crate) timeouts: Timeouts,
    pub(crate) listener: Listener,
    renewer: Renewer,
    config: RedisConfig,
}

impl RedisBackend {
    /// Connects through `conn` (one instance or a cluster, as `config`
    /// says) and checks that it answers. Fails with
    /// [`LockError::Unavailable`] if it does not, [`LockError::InvalidConfig`]
    /// for bad credentials.
    pub(crate) async fn connect(conn: Conn, config: RedisConfig) -> Result<Self, LockError> {
        let timeouts = Timeouts::new(&config);
        let what = format!("connect to Redis at {}", config.nodes[0]);
        let _: String = conn.query(timeouts, &what, &redis::cmd("PING")).await?;
        conn.preload_scripts(timeouts).await;
        // Classic PUBLISH reaches every node of a cluster, but a message
        // that crosses the cluster bus sometimes arrives ~40 ms late
        // (measured on loopback), while subscribers on the publishing node
        // get it at once. So listen on every node the URL names: with the
        // masters listed, each release is heard from its own node.
        let listener = Listener::new(&config, &config.nodes)?;
        let renewer = Renewer::start(ConnTarget {
            conn: conn.clone(),
            timeouts,
        });
        Ok(Self {
            inner: Arc::new(Inner {
                conn,
                timeouts,
                listener,
                renewer,
                config,
            }),
        })
    }

    /// The renewal traffic so far: renewals asked for and the round trips
    /// that carried them (see [`RenewalStats`]).
    pub fn renewal_stats(&self) -> RenewalStats {
        self.inner.renewer.stats()
    }

    /// The shared state, for the waits of this backend.
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// One run of the acquire script. A call that fails or is dropped
    /// before its reply leaves a clean-up behind (out of the queue, and an
    /// owner-checked release), so a late execution on the server cannot
    /// leave an orphan lock or a phantom waiter.
    pub(crate) async fn attempt(
        &self,
        keys: &LockKeys,
        request: &AcquireRequest,
        mode: QueueMode,
    ) -> Result<(AcquireReply, Instant), LockError> {
        let owner = request.owner.as_str();
        let requested_at = Instant::now();
        let cleanup = CleanupOnDrop::new(leave(
            Arc::clone(&self.inner),
            keys.clone(),
            owner.to_owned(),
            request.ttl,
        ));
        let ttl_ms = request.ttl.as_millis() as u64;
        let waiter_life_ms = WAITER_LIFE.as_millis() as u64;
        let grant_channel = self.inner.listener.grant_channel();
        let reply: Vec<i64> = self
            .inner
            .conn
            .eval(
                self.inner.timeouts,
                &ScriptCall::new(
                    "acquire",
                    &scripts().acquire,
                    &keys.all(),
                    &[
                        &owner,
                        &ttl_ms,
                        &mode.arg(),
                        &waiter_life_ms,
                        &grant_channel,
                        &request.value,
                    ],
                )
                .idempotent(),
            )
            .await?;
        cleanup.disarm();
        Ok((AcquireReply::parse(&reply), requested_at))
    }

    /// The lock `request` asked for, held with `token` since at least `at`.
    pub(crate) fn acquired(
        &self,
        keys: LockKeys,
        request: &AcquireRequest,
        token: FencingToken,
        at: Instant,
    ) -> Attempt {
        Attempt::Acquired(Acquired {
            token,
            requested_at: at,
            renewal: Renewal::Lease,
            held: Box::new(RedisHeld {
                inner: Arc::clone(&self.inner),
                lock: HeldKeys::new(keys, request),
            }),
        })
    }
}

/// Takes `owner` out of the lock's queue and releases the lock if `owner`
/// holds it (handing it to the next waiter), retrying until the server
/// answers or the lock would have expired anyway. For an acquisition that
/// ended without the lock, whose owner id is never used again.
pub(crate) async fn leave(inner: Arc<Inner>, keys: LockKeys, owner: String, ttl: Duration) {
    let mut retry =
        CleanupRetry::until(Instant::now() + ttl.max(WAITER_LIFE) * 2 + Duration::from_secs(5));
    loop {
        let outcome: Result<i64, LockError> = inner
            .conn
            .eval(
                inner.timeouts,
                &ScriptCall::new(
                    "leave the queue",
                    &scripts().release_queued,
                    &keys.all(),
                    &[&owner, &1],
                ),
            )
            .await;
        if outcome.is_ok() || !retry.pause().await {
            return;
        }
    }
}

#[async_trait]
impl Backend for RedisBackend {
    fn name(&self) -> &'static str {
        match self.inner.config.topology {
            Topology::Cluster => "redis-cluster",
            _ => "redis",
        }
    }

    fn capabilities(&self) -> Capabilities {
        // Waiters queue on the server and are handed the lock in order
        // (see `queue`).
        Capabilities::of(&[
            Expiry,
            PerLockExpiry,
            ForceRelease,
            NotifiedWakeups,
            Fifo,
            Remote,
        ])
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Option<Acquired>, LockError> {
        let wait = QueuedWait::new(self, request);
        let outcome = acquire_with_retries(&wait, request).await;
        if matches!(outcome, Ok(Some(_))) {
            wait.succeeded();
        }
        outcome
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<LockInfo>, LockError> {
        let keys = LockKeys::new(name);
        let reply: redis::Value = self
            .inner
            .conn
            .eval(
                self.inner.timeouts,
                &ScriptCall::new("inspect", &scripts().inspect, &[keys.lock.as_str()], &[])
                    .idempotent(),
            )
            .await?;
        Ok(parse_inspect(reply).map(|(value, ttl_left)| lock_info(&value, ttl_left)))
    }

    fn watch(&self, name: &LockName) -> HolderStream {
        holder_stream(RedisWatch::new(
            Arc::clone(&self.inner),
            LockKeys::new(name),
        ))
    }

    async fn force_release(&self, name: &LockName) -> Result<bool, LockError> {
        let keys = LockKeys::new(name);
        let removed: i64 = self
            .inner
            .conn
            .eval(
                self.inner.timeouts,
                &ScriptCall::new(
                    "force release",
                    &scripts().release_queued,
                    &keys.all(),
                    &[&"", &"force"],
                ),
            )
            .await?;
        Ok(removed == 1)
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("config", &self.inner.config)
            .field("renewals", &self.inner.renewer.stats())
            .finish()
    }
}

/// One lock held on an instance or cluster.
struct RedisHeld {
    inner: Arc<Inner>,
    lock: HeldKeys,
}

impl fmt::Debug for RedisHeld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedisHeld").field(&self.lock).finish()
    }
}

#[async_trait]
impl HeldLock for RedisHeld {
    async fn renew(&self, ttl: Duration) -> Result<(), LockError> {
        self.lock.renew(&self.inner.renewer, ttl).await
    }

    async fn release(&self) -> Result<(), LockError> {
        let released: i64 = self
            .inner
            .conn
            .eval(
                self.inner.timeouts,
                &ScriptCall::new(
                    "release",
                    &scripts().release_queued,
                    &self.lock.keys.all(),
                    &[&self.lock.owner, &0],
                ),
            )
            .await?;
        self.lock.confirm(released == 1)
    }

    async fn set_value(&self, value: &str) -> Result<(), LockError> {
        let changed: i64 = self
            .inner
            .conn
            .eval(
                self.inner.timeouts,
                &ScriptCall::new(
                    "set value",
                    &scripts().set_value,
                    &self.lock.keys.watched_lock(),
                    &[&self.lock.owner, &value],
                )
                .idempotent(),
            )
            .await?;
        self.lock.confirm(changed == 1)
    }
}
