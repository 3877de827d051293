//! [`Conn`]: the store's connection to one instance, a cluster or the
//! master Redis Sentinel names, and the commands and scripts run on it,
//! each within the overall bound of its [`Timeouts`].

use std::collections::HashMap;
use std::sync::Arc;

use lock_core::url::HostPort;
use lock_core::LockError;
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{FromRedisValue, RedisError, Script, ToRedisArgs};

use crate::deadline::{within, Timeouts};
use crate::errors::map_error;
use crate::link::Link;
use crate::sentinel::MasterLink;

/// A connection to one instance or to a cluster; cheap to clone (clones
/// share the underlying multiplexed connection).
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server, reconnecting by itself; and where it is, for errors
    /// (`Redis at host:port`).
    Single(ConnectionManager, Arc<str>),
    /// A cluster, routing by key slot; and its seeds, for errors.
    Cluster(ClusterConnection, Arc<str>),
    /// The master Redis Sentinel names, followed across failovers.
    Sentinel(Arc<MasterLink>),
}

/// One run of a script: what it does (named in errors), the script, its
/// KEYS and ARGV, and whether it may run a second time.
pub(crate) struct ScriptCall<'a> {
    what: &'a str,
    script: &'a Script,
    keys: &'a [&'a str],
    args: &'a [&'a dyn ToArg],
    rerun_if_dropped: bool,
}

impl<'a> ScriptCall<'a> {
    /// `script` on `keys` and `args`, run once.
    pub(crate) fn new(
        what: &'a str,
        script: &'a Script,
        keys: &'a [&'a str],
        args: &'a [&'a dyn ToArg],
    ) -> Self {
        Self {
            what,
            script,
            keys,
            args,
            rerun_if_dropped: false,
        }
    }

    /// What the call does, as errors name it.
    pub(crate) fn what(&self) -> &str {
        self.what
    }

    /// The same call, but when the connection turns out to be broken (the
    /// server restarted, the network dropped it) it runs once more on the
    /// connection the manager opens in its place. Only for scripts whose
    /// second run is harmless (acquire re-grants its own owner, renew and
    /// inspect change nothing twice).
    pub(crate) fn idempotent(self) -> Self {
        Self {
            rerun_if_dropped: true,
            ..self
        }
    }
}

impl Conn {
    /// Runs `call`, bounded by `timeouts` (each run, where it runs twice).
    pub(crate) async fn eval<T: FromRedisValue>(
        &self,
        timeouts: Timeouts,
        call: &ScriptCall<'_>,
    ) -> Result<T, LockError> {
        let started = std::time::Instant::now();
        match self.eval_once(timeouts, call).await {
            Err(LockError::Unavailable {
                source: Some(source),
                ..
            }) if call.rerun_if_dropped
                && source
                    .downcast_ref::<RedisError>()
                    .is_some_and(|e| e.is_connection_dropped() || e.is_connection_refusal())
                && started.elapsed() < timeouts.overall =>
            {
                self.eval_once(timeouts, call).await
            }
            other => other,
        }
    }

    async fn eval_once<T: FromRedisValue>(
        &self,
        timeouts: Timeouts,
        call: &ScriptCall<'_>,
    ) -> Result<T, LockError> {
        // EVALSHA built in one buffer (a `ScriptInvocation` allocates for
        // every key and argument, then copies them into a command).
        let key_bytes: usize = call.keys.iter().map(|key| key.len()).sum();
        let mut cmd = redis::Cmd::with_capacity(
            3 + call.keys.len() + call.args.len(),
            // EVALSHA, the hash, the key count, the keys, and room for
            // the arguments (owner ids, numbers, channel names).
            7 + 40 + 2 + key_bytes + 32 * call.args.len(),
        );
        cmd.arg("EVALSHA")
            .arg(call.script.get_hash())
            .arg(call.keys.len());
        for key in call.keys {
            cmd.arg(*key);
        }
        for arg in call.args {
            arg.push_to(&mut cmd);
        }
        self.run(call.what, timeouts, async |link| {
            match cmd.query_async(link).await {
                // Not cached by the server (restarted, flushed): load, again.
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    call.script.load_async(link).await?;
                    cmd.query_async(link).await
                }
                result => result,
            }
        })
        .await
    }

    /// Runs `op` on this connection (on a sentinel's master, the one
    /// found now), bounded by `timeouts`; a sentinel link learns whether
    /// the master answered.
    async fn run<T>(
        &self,
        what: &str,
        timeouts: Timeouts,
        op: impl AsyncFnOnce(&mut Link) -> redis::RedisResult<T>,
    ) -> Result<T, LockError> {
        let attempt = async {
            let (mut link, watch) = match self {
                Conn::Single(c, _) => (Link::Manager(c.clone()), None),
                Conn::Cluster(c, _) => (Link::Cluster(c.clone()), None),
                Conn::Sentinel(master) => {
                    let (c, watch) = master.connection().await?;
                    (Link::Manager(c), Some(watch))
                }
            };
            let result = op(&mut link).await;
            if let Some(watch) = watch {
                watch.settle(&result);
            }
            result.map_err(|e| self.located(map_error(what, e)))
        };
        within(what, timeouts, attempt).await
    }

    /// A single server on `node`, named in its errors.
    pub(crate) fn single(manager: ConnectionManager, node: &HostPort) -> Self {
        Conn::Single(manager, format!("Redis at {node}").into())
    }

    /// A cluster behind `seeds`, named in its errors.
    pub(crate) fn cluster(connection: ClusterConnection, seeds: &[HostPort]) -> Self {
        let seeds: Vec<String> = seeds.iter().map(ToString::to_string).collect();
        Conn::Cluster(
            connection,
            format!("Redis Cluster {}", seeds.join(",")).into(),
        )
    }

    /// `error`, saying which server refused, when the refusal is about
    /// permissions (a mistake in the URL or the server's ACL, so the
    /// reader needs to know which server); other errors pass unchanged.
    fn located(&self, error: LockError) -> LockError {
        let LockError::PermissionDenied { message, source } = error else {
            return error;
        };
        let place = match self {
            Conn::Single(_, place) | Conn::Cluster(_, place) => place.to_string(),
            Conn::Sentinel(master) => master.place(),
        };
        let message = match message.contains(place.trim_start_matches("Redis at ")) {
            true => message,
            false => format!("{place}: {message}"),
        };
        LockError::PermissionDenied { message, source }
    }

    /// Runs a raw command, bounded by `timeouts`.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        timeouts: Timeouts,
        what: &str,
        cmd: &redis::Cmd,
    ) -> Result<T, LockError> {
        self.run(what, timeouts, async |link| cmd.query_async(link).await)
            .await
    }

    /// Runs a raw command that names no key on the master of cluster slot
    /// `slot` (off a cluster: on the one server), bounded by `timeouts`.
    pub(crate) async fn query_on_slot<T: FromRedisValue>(
        &self,
        timeouts: Timeouts,
        what: &str,
        cmd: &redis::Cmd,
        slot: u16,
    ) -> Result<T, LockError> {
        self.run(what, timeouts, async |link| match link {
            Link::Cluster(cluster) => {
                let route = Route::new(slot, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                let reply = cluster.route_command(cmd.clone(), routing).await?;
                Ok(redis::from_redis_value(reply)?)
            }
            Link::Manager(_) => cmd.query_async(link).await,
        })
        .await
    }

    /// Loads every script, so the first use of each costs one round trip
    /// instead of three (EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA): a slow
    /// first renewal could outlast a short lease. Best effort: a server
    /// that restarts later forgets them, and EVALSHA falls back by itself.
    pub(crate) async fn preload_scripts(&self, timeouts: Timeouts) {
        let loads = crate::scripts::scripts().all().map(|script| async move {
            let load = async |link: &mut Link| script.load_async(link).await;
            let _ = self.run("load a script", timeouts, load).await;
        });
        futures_util::future::join_all(loads).await;
    }

    /// Splits `keys` into groups one script call may touch together: all
    /// of them on a single instance, one group per slot on a cluster.
    pub(crate) fn script_groups<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Vec<usize>> {
        match self {
            Conn::Single(..) | Conn::Sentinel(_) => vec![(0..keys.len()).collect()],
            Conn::Cluster(..) => {
                let mut groups: HashMap<Route, Vec<usize>> = HashMap::new();
                for (i, key) in keys.iter().enumerate() {
                    groups
                        .entry(Route::with_key(key, SlotAddr::Master))
                        .or_default()
                        .push(i);
                }
                groups.into_values().collect()
            }
        }
    }
}

/// A script argument of any of the few types the scripts take.
pub(crate) trait ToArg: Sync {
    fn push_to(&self, cmd: &mut redis::Cmd);
}

impl<T: ToRedisArgs + Sync> ToArg for T {
    fn push_to(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self);
    }
}
