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
//! This module holds the backend; `round` runs one acquire round and
//! undoes partial ones, `held` renews and releases a held lock.

mod held;
mod round;
mod watch;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::join_all;
use lock_core::backend::Capability::{
    Expiry, ForceRelease, NotifiedWakeups, PerLockExpiry, Remote,
};
use lock_core::backend::{
    acquire_with_retries, holder_stream, AcquireRequest, Acquired, Attempt, Backend, Backoff,
    Capabilities, HolderStream, TryAcquire, WakeSubscription,
};
use lock_core::{FencingToken, LockError, LockInfo, LockName, Namespace};

use crate::config::RedisConfig;
use crate::conn::{Conn, ScriptCall, Timeouts};
use crate::counter::Counters;
use crate::keys::LockKeys;
use crate::pubsub::{Listener, Listening};
use crate::purge::purge;
use crate::renewal::{RenewalStats, Renewer};
use crate::scripts::{parse_inspect, scripts};
use crate::value::{parse_lock_value, parse_redlock_rest};

use held::RedlockTarget;
use watch::RedlockWatch;

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

    /// The Redis names of the lock `name`: the same on every master, with
    /// one counter per namespace.
    fn keys(&self, name: &LockName) -> LockKeys {
        LockKeys::new(name, Counters::PerNamespace)
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
        let keys = self.inner.keys(name);
        let replies: Vec<redis::Value> = self
            .on_all(&ScriptCall::new(
                "inspect",
                &scripts().inspect,
                &[keys.lock()],
                &[],
            ))
            .await?;
        let values: Vec<(String, Option<Duration>)> =
            replies.into_iter().filter_map(parse_inspect).collect();
        Ok(majority_holder(&values, self.inner.quorum))
    }

    fn watch(&self, name: &LockName) -> HolderStream {
        holder_stream(RedlockWatch::new(self.clone(), name.clone()))
    }

    async fn force_release(&self, name: &LockName) -> Result<bool, LockError> {
        let keys = self.inner.keys(name);
        let removed: Vec<i64> = self
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
        let inner = &self.inner;
        let outcomes = join_all(
            inner
                .nodes
                .iter()
                .map(|node| purge(node, inner.timeouts, namespace)),
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
        Ok(self.inner.listener.watch(self.inner.keys(name).channel()))
    }

    async fn try_acquire_once(&self, request: &AcquireRequest) -> Result<Attempt, LockError> {
        let keys = self.inner.keys(&request.name);
        let first = self.attempt(&keys, request).await?;
        if matches!(first, Attempt::Acquired(_)) || !request.wait.may_wait() {
            return Ok(first);
        }
        match self.inner.listener.ensure_listening(keys.channel()).await {
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

/// The holder a majority of masters agree on, from each master's lock
/// value and PTTL: the largest token among them (the raise stamps it on
/// all), the shortest lease, and the value with the highest number.
fn majority_holder(values: &[(String, Option<Duration>)], quorum: usize) -> Option<LockInfo> {
    let stored: Vec<_> = values
        .iter()
        .filter_map(|(value, ttl)| Some((parse_lock_value(value)?, *ttl)))
        .collect();
    for (candidate, _) in &stored {
        let same: Vec<_> = stored
            .iter()
            .filter(|(s, _)| s.owner == candidate.owner)
            .collect();
        if same.len() < quorum {
            continue;
        }
        let token = same.iter().map(|(s, _)| s.token).max();
        let ttl_left = same.iter().filter_map(|(_, ttl)| *ttl).min();
        let value = same
            .iter()
            .map(|(s, _)| parse_redlock_rest(s.rest))
            .max_by_key(|(seq, _)| *seq)
            .map_or("", |(_, value)| value);
        let token = token.unwrap_or(FencingToken::new(0));
        return Some(LockInfo::new(candidate.owner, token, ttl_left).with_value(value));
    }
    None
}

impl fmt::Debug for RedlockBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockBackend")
            .field("config", &self.inner.config)
            .field("quorum", &self.inner.quorum)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn master(value: &str, ttl_ms: u64) -> (String, Option<Duration>) {
        (value.to_owned(), Some(Duration::from_millis(ttl_ms)))
    }

    #[test]
    fn the_holder_is_the_owner_a_majority_agrees_on() {
        let values = [
            master("7 a\n2 newest", 900),
            master("5 a\n1 older", 800),
            master("7 a", 950),
            master("9 b\n0 other", 990),
        ];
        let holder = majority_holder(&values, 3).unwrap();
        assert_eq!(holder.owner, "a");
        assert_eq!(holder.token, FencingToken::new(7), "the stamped token");
        assert_eq!(holder.ttl_left, Some(Duration::from_millis(800)));
        assert_eq!(holder.value, "newest", "the highest-numbered value");
        assert_eq!(majority_holder(&values[1..], 3), None, "no majority");
    }

    #[test]
    fn a_value_replaced_on_a_minority_is_seen_only_if_newer() {
        let values = [
            master("7 a\n1 set", 900),
            master("7 a\n1 set", 900),
            master("7 a", 900),
        ];
        assert_eq!(majority_holder(&values, 2).unwrap().value, "set");
        let unset = [master("7 a\n3 ", 900), master("7 a\n2 x", 900)];
        assert_eq!(majority_holder(&unset, 2).unwrap().value, "");
    }
}
