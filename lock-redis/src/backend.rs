//! [`RedisBackend`]: locks on one Redis instance or a Redis Cluster.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lock_core::backend::Capability::{
    Expiry, Fifo, ForceRelease, NotifiedWakeups, PerLockExpiry, Remote, Semaphores, SharedLocks,
};
use lock_core::backend::{
    acquire_with_retries, holder_stream, AcquireRequest, Acquired, Attempt, Backend, Capabilities,
    HoldKind, HolderStream, Primitive, Renewal,
};
use lock_core::{FencingToken, LockError, LockInfo, LockName, Namespace};

use crate::config::{RedisConfig, Topology};
use crate::conn::{Conn, ScriptCall, Timeouts};
use crate::counter::Counters;
use crate::held::RedisHeld;
use crate::keys::LockKeys;
use crate::leaving::{object_of, LeaveOnDrop, Leaving, Pending};
use crate::pubsub::{Listener, Target};
use crate::purge::purge;
use crate::queue::{QueueMode, QueuedWait, WAITER_LIFE};
use crate::renewal::{ConnTarget, HeldKeys, RenewalStats, Renewer};
use crate::retry::CleanupRetry;
use crate::scripts::{limit_mismatch, scripts, AcquireReply};
use crate::shared::{holders_of, limit_arg};
use crate::watch::RedisWatch;

/// Locks on one Redis instance (`redis://`), a Redis Cluster
/// (`redis+cluster://`) or the master Redis Sentinel names
/// (`redis+sentinel://`). See the crate docs for the guarantees.
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) conn: Conn,
    pub(crate) timeouts: Timeouts,
    pub(crate) listener: Listener,
    pub(crate) renewer: Renewer,
    /// Clean-ups of abandoned acquisitions under way.
    pub(crate) leaving: Arc<Leaving>,
    /// How locks share fencing counters: per namespace, or per namespace
    /// and slot on a cluster.
    pub(crate) counters: Counters,
    config: RedisConfig,
}

impl Inner {
    /// The Redis names of the lock `name`.
    pub(crate) fn keys(&self, name: &LockName) -> LockKeys {
        LockKeys::new(name, self.counters)
    }
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
            inner: Arc::new(Inner {
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

    /// The renewal traffic so far: renewals asked for and the round trips
    /// that carried them (see [`RenewalStats`]).
    pub fn renewal_stats(&self) -> RenewalStats {
        self.inner.renewer.stats()
    }

    /// The shared state, for the waits of this backend.
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// One run of the acquire script of `request`'s kind (exclusive, read
    /// or permit). A call that fails or is dropped before its reply
    /// leaves a clean-up behind (out of the queue, and an owner-checked
    /// release), so a late execution on the server cannot leave an orphan
    /// hold or a phantom waiter. Waits first for this backend's clean-ups
    /// of the same object still under way (see [`Leaving`]).
    pub(crate) async fn attempt(
        &self,
        keys: &LockKeys,
        request: &AcquireRequest,
        mode: QueueMode,
    ) -> Result<(AcquireReply, Instant), LockError> {
        let owner = request.owner.as_str();
        let kind = request.kind;
        let timeouts = self.inner.timeouts;
        self.inner
            .leaving
            .settled(object_of(keys, kind), timeouts.overall)
            .await;
        let requested_at = Instant::now();
        let cleanup = LeaveOnDrop::new(&self.inner, keys, owner, request.ttl, kind);
        let ttl_ms = request.ttl.as_millis() as u64;
        let waiter_life_ms = WAITER_LIFE.as_millis() as u64;
        let grant_channel = self.inner.listener.grant_channel();
        let lock_keys = keys.with_readers();
        let semaphore_keys = keys.semaphore();
        let limit = limit_arg(kind);
        let (what, script, names): (_, _, &[&str]) = match kind {
            HoldKind::Shared => ("acquire a read lock", &scripts().acquire_read, &lock_keys),
            HoldKind::Permit { .. } => (
                "acquire a permit",
                &scripts().acquire_permit,
                &semaphore_keys,
            ),
            _ => ("acquire", &scripts().acquire, &lock_keys),
        };
        let args: [&dyn crate::conn::ToArg; 7] = [
            &owner,
            &ttl_ms,
            &mode.arg(),
            &waiter_life_ms,
            &grant_channel,
            &request.value,
            &limit,
        ];
        // The exclusive script takes six arguments: no seventh to send.
        let args = if limit.is_empty() {
            &args[..6]
        } else {
            &args[..]
        };
        let reply: Vec<i64> = self
            .inner
            .conn
            .eval(
                timeouts,
                &ScriptCall::new(what, script, names, args).idempotent(),
            )
            .await?;
        cleanup.disarm();
        if let Some(stored) = limit_mismatch(&reply) {
            let HoldKind::Permit { limit: asked } = kind else {
                unreachable!("only permits have limits")
            };
            return Err(LockError::LimitMismatch {
                key: request.name.key().to_string(),
                stored,
                asked,
            });
        }
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
            held: Box::new(RedisHeld::new(
                Arc::clone(&self.inner),
                HeldKeys::new(keys, request),
                request.kind,
            )),
        })
    }
}

/// Takes `owner` out of the line of the object it asked a `kind` hold of
/// and gives back a hold it has there (letting the next waiters in),
/// retrying until the server answers or the hold would have expired
/// anyway. For an acquisition that ended without its hold, whose owner id
/// is never used again. `pending` counts the clean-up as under way until
/// the first answer (or failure).
pub(crate) async fn leave(
    inner: Arc<Inner>,
    keys: LockKeys,
    owner: String,
    ttl: Duration,
    kind: HoldKind,
    pending: Pending,
) {
    let mut pending = Some(pending);
    let mut retry =
        CleanupRetry::until(Instant::now() + ttl.max(WAITER_LIFE) * 2 + Duration::from_secs(5));
    let lock_keys = keys.with_readers();
    let semaphore_keys = keys.semaphore();
    let (script, names): (_, &[&str]) = match kind {
        HoldKind::Permit { .. } => (&scripts().release_permit, &semaphore_keys),
        _ => (&scripts().release_queued, &lock_keys),
    };
    loop {
        let outcome: Result<i64, LockError> = inner
            .conn
            .eval(
                inner.timeouts,
                &ScriptCall::new("leave the queue", script, names, &[&owner, &1]),
            )
            .await;
        pending.take();
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
            Topology::Sentinel => "redis-sentinel",
            _ => "redis",
        }
    }

    fn capabilities(&self) -> Capabilities {
        // Waiters queue on the server and are handed the lock in order
        // (see `queue`); read locks and permits wait in the same kind of
        // line (see `shared`).
        Capabilities::of(&[
            Expiry,
            PerLockExpiry,
            ForceRelease,
            NotifiedWakeups,
            Fifo,
            Remote,
            SharedLocks,
            Semaphores,
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
        // The exclusive holder, or the oldest reader.
        Ok(holders_of(&self.inner, name, Primitive::Lock)
            .await?
            .into_iter()
            .next())
    }

    async fn holders(
        &self,
        name: &LockName,
        primitive: Primitive,
    ) -> Result<Vec<LockInfo>, LockError> {
        holders_of(&self.inner, name, primitive).await
    }

    fn watch(&self, name: &LockName) -> HolderStream {
        holder_stream(RedisWatch::new(
            Arc::clone(&self.inner),
            self.inner.keys(name),
        ))
    }

    /// Removes the holds there are when it is called: the script removes
    /// only holds up to the highest token seen here, so a cluster client
    /// that sends the script again after a lost reply never removes the
    /// holder the first run handed the lock to.
    async fn force_release(&self, name: &LockName) -> Result<bool, LockError> {
        let seen = holders_of(&self.inner, name, Primitive::Lock).await?;
        let Some(upto) = seen.iter().map(|h| h.token.get()).max() else {
            return Ok(false);
        };
        let keys = self.inner.keys(name);
        let removed: i64 = self
            .inner
            .conn
            .eval(
                self.inner.timeouts,
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
        purge(&self.inner.conn, self.inner.timeouts, namespace).await?;
        Ok(())
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
