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

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::future::join_all;
use lock_core::{
    acquire_with_retries, clock_drift, AcquireRequest, Acquired, Attempt, Backend, Backoff,
    Capabilities, CleanupOnDrop, FencingToken, FloorProbe, HeldLock, LockError, LockInfo, LockName,
    LossReason, Renewal, TryAcquire, WakeSubscription,
};

use crate::config::{RedisConfig, Topology};
use crate::conn::{self, Conn, Timeouts};
use crate::floor::ConnFloorProbe;
use crate::keys::LockKeys;
use crate::pubsub::{Listener, Listening};
use crate::renewal::{
    clone_error, renew_on, HeldKeys, RenewItem, RenewTarget, RenewalStats, Renewer,
};
use crate::scripts::{parse_inspect, parse_lock_value, scripts, AcquireReply};

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

/// How the masters answered one acquire.
#[derive(Debug, Default)]
struct Tally {
    /// Masters that granted the lock, with their counter values.
    granted: Vec<(usize, u64)>,
    /// Remaining leases of other holders.
    held: Vec<Option<Duration>>,
    /// Masters that did not answer.
    failed: usize,
}

impl RedlockBackend {
    /// Connects to the masters `config` names; at least a majority must
    /// answer, else [`LockError::Unavailable`].
    pub async fn connect(config: RedisConfig) -> Result<Self, LockError> {
        if config.topology != Topology::Redlock {
            return Err(LockError::invalid_config(
                "RedlockBackend needs a redlock:// configuration",
            ));
        }
        let timeouts = Timeouts::new(&config);
        let nodes = config
            .nodes
            .iter()
            .map(|node| conn::lazy_manager(&config, node).map(Conn::Single))
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

    /// One Redlock round; see the module docs.
    async fn attempt(
        &self,
        keys: &LockKeys,
        request: &AcquireRequest,
    ) -> Result<Attempt, LockError> {
        let inner = &self.inner;
        let owner = request.owner.as_str();
        let started = Instant::now();
        // Covers cancellation only; a failed round is undone inline below,
        // so no background undo can delete what a later round of the same
        // acquisition (same owner) takes.
        let undo_on_drop = CleanupOnDrop::new(undo(
            Arc::clone(inner),
            keys.clone(),
            owner.to_owned(),
            request.ttl,
        ));
        let tally = self.acquire_on_all(keys, owner, request.ttl).await;
        let n = inner.nodes.len();
        if tally.granted.len() >= inner.quorum {
            let token = tally.granted.iter().map(|&(_, t)| t).max().unwrap_or(0);
            let raised = self.raise_all(keys, owner, token).await;
            let drift = clock_drift(request.ttl);
            if raised >= inner.quorum && started.elapsed() + drift < request.ttl {
                undo_on_drop.disarm();
                return Ok(Attempt::Acquired(Acquired {
                    token: FencingToken::new(token),
                    requested_at: started,
                    renewal: Renewal::Lease,
                    held: Box::new(RedlockHeld {
                        inner: Arc::clone(inner),
                        lock: HeldKeys::new(keys.clone(), request),
                    }),
                }));
            }
            // Too slow, or the raise was not confirmed: undo and report.
            undo_round(inner, keys, owner).await;
            undo_on_drop.disarm();
            return Err(LockError::Unavailable {
                message: format!(
                    "Redlock: the lock on {} masters could not be confirmed in time",
                    tally.granted.len()
                ),
                source: None,
            });
        }
        if !tally.granted.is_empty() || tally.failed > 0 {
            undo_round(inner, keys, owner).await;
        }
        undo_on_drop.disarm();
        if tally.held.len() > n - inner.quorum {
            let retry_after = tally.held.iter().flatten().min().copied();
            return Ok(Attempt::Held { retry_after });
        }
        Err(LockError::Unavailable {
            message: format!(
                "Redlock: {} of {n} masters granted the lock, {} did not answer; {} needed",
                tally.granted.len(),
                tally.failed,
                inner.quorum
            ),
            source: None,
        })
    }

    async fn acquire_on_all(&self, keys: &LockKeys, owner: &str, ttl: Duration) -> Tally {
        let ttl_ms = ttl.as_millis() as u64;
        let (names, args): ([&str; 2], [&dyn conn::ToArg; 2]) =
            ([keys.lock.as_str(), keys.token.as_str()], [&owner, &ttl_ms]);
        let calls = self.inner.nodes.iter().map(|node| {
            node.eval_idempotent::<Vec<i64>>(
                self.inner.timeouts,
                "Redlock acquire",
                &scripts().acquire,
                &names,
                &args,
            )
        });
        let mut tally = Tally::default();
        for (i, reply) in join_all(calls).await.into_iter().enumerate() {
            match reply.map(|reply| AcquireReply::parse(&reply)) {
                Ok(AcquireReply::Acquired(token)) => tally.granted.push((i, token.get())),
                Ok(AcquireReply::Held { pttl, .. }) => tally.held.push(pttl),
                Err(_) => tally.failed += 1,
            }
        }
        tally
    }

    /// Raises every master's counter to `token`; returns how many masters
    /// confirmed that they hold our lock with that token.
    async fn raise_all(&self, keys: &LockKeys, owner: &str, token: u64) -> usize {
        let (names, args): ([&str; 2], [&dyn conn::ToArg; 2]) =
            ([keys.lock.as_str(), keys.token.as_str()], [&token, &owner]);
        let calls = self.inner.nodes.iter().map(|node| {
            node.eval_idempotent::<i64>(
                self.inner.timeouts,
                "Redlock raise",
                &scripts().raise,
                &names,
                &args,
            )
        });
        join_all(calls)
            .await
            .into_iter()
            .filter(|r| matches!(r, Ok(1)))
            .count()
    }

    /// Runs `script` on every master; fails unless a majority answered.
    async fn on_all<T: redis::FromRedisValue>(
        &self,
        what: &str,
        script: &redis::Script,
        keys: &[&str],
        args: &[&dyn conn::ToArg],
    ) -> Result<Vec<T>, LockError> {
        let calls = self
            .inner
            .nodes
            .iter()
            .map(|node| node.eval::<T>(self.inner.timeouts, what, script, keys, args));
        let answers: Vec<T> = join_all(calls)
            .await
            .into_iter()
            .filter_map(Result::ok)
            .collect();
        if answers.len() < self.inner.quorum {
            return Err(LockError::Unavailable {
                message: format!(
                    "Redlock {what}: only {} of {} masters answered",
                    answers.len(),
                    self.inner.nodes.len()
                ),
                source: None,
            });
        }
        Ok(answers)
    }
}

/// One owner-checked delete on every master. A master that does not
/// answer keeps what it may have (it expires after the ttl, and a later
/// round of the same acquisition re-grants its own leftover).
async fn undo_round(inner: &Inner, keys: &LockKeys, owner: &str) {
    let (lock, args): ([&str; 1], [&dyn conn::ToArg; 2]) =
        ([keys.lock.as_str()], [&owner, &keys.channel]);
    let calls = inner.nodes.iter().map(|node| {
        node.eval::<i64>(
            inner.timeouts,
            "Redlock undo",
            &scripts().release,
            &lock,
            &args,
        )
    });
    join_all(calls).await;
}

/// Owner-checked delete on every master, retried on masters that did not
/// answer until the lock would have expired anyway (for a cancelled
/// acquisition, whose owner id is never used again).
async fn undo(inner: Arc<Inner>, keys: LockKeys, owner: String, ttl: Duration) {
    let give_up = Instant::now() + ttl * 2 + Duration::from_secs(5);
    let mut pending: Vec<usize> = (0..inner.nodes.len()).collect();
    let mut delay = Duration::from_millis(20);
    while !pending.is_empty() {
        let (lock, args): ([&str; 1], [&dyn conn::ToArg; 2]) =
            ([keys.lock.as_str()], [&owner, &keys.channel]);
        let calls = pending.iter().map(|&i| {
            inner.nodes[i].eval_idempotent::<i64>(
                inner.timeouts,
                "Redlock undo",
                &scripts().release,
                &lock,
                &args,
            )
        });
        let outcomes = join_all(calls).await;
        pending = pending
            .into_iter()
            .zip(outcomes)
            .filter(|(_, o)| o.is_err())
            .map(|(i, _)| i)
            .collect();
        if pending.is_empty() || Instant::now() + delay > give_up {
            return;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

#[async_trait]
impl Backend for RedlockBackend {
    fn name(&self) -> &'static str {
        "redlock"
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::default();
        caps.expiry = true;
        caps.per_lock_expiry = true;
        caps.force_release = true;
        caps.notified_wakeups = true;
        caps.remote = true;
        caps
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Option<Acquired>, LockError> {
        acquire_with_retries(self, request).await
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<LockInfo>, LockError> {
        let keys = LockKeys::new(name);
        let replies: Vec<redis::Value> = self
            .on_all("inspect", &scripts().inspect, &[keys.lock.as_str()], &[])
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
            .on_all(
                "force release",
                &scripts().force_release,
                &[keys.lock.as_str()],
                &[&keys.channel],
            )
            .await?;
        Ok(removed.contains(&1))
    }

    async fn floor_probe(&self) -> Result<Option<Box<dyn FloorProbe>>, LockError> {
        Ok(Some(Box::new(
            ConnFloorProbe::open(&self.inner.config).await?,
        )))
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

/// Renewals on every master: a lock stays ours while a majority renewed it.
struct RedlockTarget {
    nodes: Vec<Conn>,
    timeouts: Timeouts,
    quorum: usize,
}

#[async_trait]
impl RenewTarget for RedlockTarget {
    async fn renew_many(
        &self,
        ttl: Duration,
        items: &[RenewItem],
    ) -> (Vec<Result<bool, LockError>>, u64) {
        let per_node = join_all(
            self.nodes
                .iter()
                .map(|n| renew_on(n, self.timeouts, ttl, items)),
        )
        .await;
        let round_trips = per_node.iter().map(|(_, trips)| trips).sum();
        let n = self.nodes.len();
        let results = (0..items.len())
            .map(|i| {
                let renewed = per_node
                    .iter()
                    .filter(|(r, _)| matches!(r[i], Ok(true)))
                    .count();
                let refused = per_node
                    .iter()
                    .filter(|(r, _)| matches!(r[i], Ok(false)))
                    .count();
                if renewed >= self.quorum {
                    Ok(true)
                } else if refused > n - self.quorum {
                    Ok(false)
                } else {
                    let error = per_node.iter().find_map(|(r, _)| r[i].as_ref().err());
                    Err(error
                        .map(clone_error)
                        .unwrap_or_else(|| LockError::Unavailable {
                            message: format!("Redlock renew: {renewed} of {n} masters renewed"),
                            source: None,
                        }))
                }
            })
            .collect();
        (results, round_trips)
    }
}

/// One lock held on a majority of masters.
struct RedlockHeld {
    inner: Arc<Inner>,
    lock: HeldKeys,
}

impl fmt::Debug for RedlockHeld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedlockHeld").field(&self.lock).finish()
    }
}

#[async_trait]
impl HeldLock for RedlockHeld {
    async fn renew(&self, ttl: Duration) -> Result<(), LockError> {
        self.lock.renew(&self.inner.renewer, ttl).await
    }

    async fn release(&self) -> Result<(), LockError> {
        let (lock, args): ([&str; 1], [&dyn conn::ToArg; 2]) = (
            [self.lock.keys.lock.as_str()],
            [&self.lock.owner, &self.lock.keys.channel],
        );
        let calls = self.inner.nodes.iter().map(|node| {
            node.eval::<i64>(
                self.inner.timeouts,
                "Redlock release",
                &scripts().release,
                &lock,
                &args,
            )
        });
        let outcomes = join_all(calls).await;
        let released = outcomes.iter().filter(|o| matches!(o, Ok(1))).count();
        let unknown = outcomes.iter().filter(|o| o.is_err()).count();
        if released >= self.inner.quorum
            || (released > 0 && released + unknown >= self.inner.quorum)
        {
            Ok(())
        } else if released + unknown >= self.inner.quorum {
            Err(LockError::Unavailable {
                message: format!(
                    "Redlock release: {unknown} of {} masters did not answer",
                    outcomes.len()
                ),
                source: None,
            })
        } else {
            Err(LockError::lost(
                self.lock.key.clone(),
                LossReason::RenewalRefused,
            ))
        }
    }
}
