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
//! majority must confirm. Any later holder's majority shares a master with
//! that confirmed majority, whose counter was raised before the later
//! holder could take the lock there, so the later token is larger. This
//! holds while a master that restarts keeps its counters (AOF with
//! `appendfsync always`); see the crate docs.
//!
//! This module holds the backend; `round` runs one acquire round and
//! undoes partial ones, `held` renews and releases a held lock.

mod held;
mod round;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::join_all;
use lock_core::backend::Capability::{
    Expiry, ForceRelease, NotifiedWakeups, PerLockExpiry, Remote,
};
use lock_core::backend::{
    acquire_with_retries, AcquireRequest, Acquired, Attempt, Backend, Backoff, Capabilities,
    TryAcquire, WakeSubscription,
};
use lock_core::{FencingToken, LockError, LockInfo, LockName};

use crate::config::RedisConfig;
use crate::conn::{Conn, ScriptCall, Timeouts};
use crate::keys::LockKeys;
use crate::pubsub::{Listener, Listening};
use crate::renewal::{RenewalStats, Renewer};
use crate::scripts::{parse_inspect, parse_lock_value, scripts};

use held::RedlockTarget;

/// Locks held by a majority of independent masters (`redlock://`).
#[derive(Clone)]
pub struct RedlockBackend {
    inner: Arc<Inner>,
}

struct Inner {
    nodes: Vec<Conn>,
    timeouts: Timeouts,
    quorum: usize,
    listener: Listener,
    renewer: Renewer,
    config: RedisConfig,
}

impl Inner {
    /// Runs `call` on the masters at `nodes` (indices into
    /// [`nodes`](Self::nodes)), all at once; their outcomes in that order.
    async fn eval_on<T: redis::FromRedisValue>(
        &self,
        nodes: impl Iterator<Item = usize>,
        call: &ScriptCall<'_>,
    ) -> Vec<Result<T, LockError>> {
        join_all(nodes.map(|i| self.nodes[i].eval(self.timeouts, call))).await
    }
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
            .map(|node| config.connection_manager(node).map(Conn::Single))
            .collect::<Result<Vec<_>, _>>()?;
        let quorum = config.quorum();
        let ping = redis::cmd("PING");
        let pings = nodes
            .iter()
            .map(|c| c.query::<String>(timeouts, "PING", &ping));
        let answered = join_all(pings)
            .await
            .into_iter()
            .filter(Result::is_ok)
            .count();
        join_all(nodes.iter().map(|node| node.preload_scripts(timeouts))).await;
        if answered < quorum {
            return Err(LockError::Unavailable {
                message: format!(
                    "only {answered} of {} Redlock masters answered; {quorum} needed",
                    nodes.len()
                ),
                source: None,
            });
        }
        let listener = Listener::new(&config, &config.nodes)?;
        let renewer = Renewer::start(RedlockTarget {
            nodes: nodes.clone(),
            timeouts,
            quorum,
        });
        Ok(Self {
            inner: Arc::new(Inner {
                nodes,
                timeouts,
                quorum,
                listener,
                renewer,
                config,
            }),
        })
    }

    /// The renewal traffic so far (round trips count one per master).
    pub fn renewal_stats(&self) -> RenewalStats {
        self.inner.renewer.stats()
    }

    /// Runs `call` on every master; fails unless a majority answered.
    async fn on_all<T: redis::FromRedisValue>(
        &self,
        call: &ScriptCall<'_>,
    ) -> Result<Vec<T>, LockError> {
        let answers: Vec<T> = self
            .inner
            .eval_on(0..self.inner.nodes.len(), call)
            .await
            .into_iter()
            .filter_map(Result::ok)
            .collect();
        if answers.len() < self.inner.quorum {
            return Err(LockError::Unavailable {
                message: format!(
                    "Redlock {}: only {} of {} masters answered",
                    call.what(),
                    answers.len(),
                    self.inner.nodes.len()
                ),
                source: None,
            });
        }
        Ok(answers)
    }
}

#[async_trait]
impl Backend for RedlockBackend {
    fn name(&self) -> &'static str {
        "redlock"
    }

    fn capabilities(&self) -> Capabilities {
        // No `fifo`: a Redlock waiter is not queued on the masters.
        Capabilities::of(&[Expiry, PerLockExpiry, ForceRelease, NotifiedWakeups, Remote])
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Option<Acquired>, LockError> {
        acquire_with_retries(self, request).await
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<LockInfo>, LockError> {
        let keys = LockKeys::new(name);
        let replies: Vec<redis::Value> = self
            .on_all(&ScriptCall::new(
                "inspect",
                &scripts().inspect,
                &[keys.lock.as_str()],
                &[],
            ))
            .await?;
        let values: Vec<(String, Option<Duration>)> =
            replies.into_iter().filter_map(parse_inspect).collect();
        // The holder is the owner a majority agrees on.
        for (value, _) in &values {
            let Some((_, owner)) = parse_lock_value(value) else {
                continue;
            };
            let same: Vec<&(String, Option<Duration>)> = values
                .iter()
                .filter(|(v, _)| parse_lock_value(v).is_some_and(|(_, o)| o == owner))
                .collect();
            if same.len() >= self.inner.quorum {
                let token = same
                    .iter()
                    .filter_map(|(v, _)| parse_lock_value(v))
                    .map(|(t, _)| t)
                    .max();
                let ttl_left = same.iter().filter_map(|(_, ttl)| *ttl).min();
                return Ok(Some(LockInfo::new(
                    owner,
                    token.unwrap_or(FencingToken::new(0)),
                    ttl_left,
                )));
            }
        }
        Ok(None)
    }

    async fn force_release(&self, name: &LockName) -> Result<bool, LockError> {
        let keys = LockKeys::new(name);
        let removed: Vec<i64> = self
            .on_all(&ScriptCall::new(
                "force release",
                &scripts().force_release,
                &[keys.lock.as_str()],
                &[&keys.channel],
            ))
            .await?;
        Ok(removed.contains(&1))
    }
}

#[async_trait]
impl TryAcquire for RedlockBackend {
    async fn watch_releases(&self, name: &LockName) -> Result<WakeSubscription, LockError> {
        Ok(self.inner.listener.watch(&LockKeys::new(name).channel))
    }

    async fn try_acquire_once(&self, request: &AcquireRequest) -> Result<Attempt, LockError> {
        let keys = LockKeys::new(&request.name);
        let first = self.attempt(&keys, request).await?;
        if matches!(first, Attempt::Acquired(_)) || !request.wait.may_wait() {
            return Ok(first);
        }
        match self.inner.listener.ensure_listening(&keys.channel).await {
            Listening::Now => self.attempt(&keys, request).await,
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
            .field("config", &self.inner.config)
            .field("quorum", &self.inner.quorum)
            .finish()
    }
}
