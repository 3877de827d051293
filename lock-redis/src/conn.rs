//! Connections: building clients from a [`RedisConfig`], running scripts
//! with an overall deadline, and turning client errors into [`LockError`]s.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lock_core::url::{HostPort, TlsFiles};
use lock_core::LockError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{
    Client, ConnectionAddr, ConnectionInfo, FromRedisValue, IntoConnectionInfo, ProtocolVersion,
    RedisConnectionInfo, RedisError, Script, ToRedisArgs,
};

use crate::config::RedisConfig;
use crate::link::Link;
use crate::sentinel::MasterLink;

/// How many times the connection manager retries a reconnect before the
/// waiting commands fail (the next command starts a new round). Kept low
/// so a dead server gives `Unavailable` promptly.
const RECONNECT_RETRIES: usize = 2;

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

/// Deadlines for one command.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    /// Bound for one command including a reconnect it may wait for.
    pub(crate) overall: Duration,
}

impl Timeouts {
    pub(crate) fn new(config: &RedisConfig) -> Self {
        // A command may wait for a reconnect (one connect) and then its reply.
        Self {
            overall: config.connect_timeout + config.response_timeout,
        }
    }
}

/// The certificates of a TLS URL for the client library: the CA to trust
/// (else the system's roots) and the client's own certificate, if any.
fn certificates(tls: &TlsFiles) -> redis::TlsCertificates {
    install_crypto_provider();
    redis::TlsCertificates {
        client_tls: tls.identity.as_ref().map(|id| redis::ClientTlsConfig {
            client_cert: id.cert.bytes().to_vec(),
            client_key: id.key.bytes().to_vec(),
        }),
        root_cert: tls.ca.as_ref().map(|ca| ca.bytes().to_vec()),
    }
}

/// The address of `node`, over TLS where `config` says so.
pub(crate) fn address(config: &RedisConfig, node: &HostPort) -> ConnectionAddr {
    match &config.tls {
        None => ConnectionAddr::Tcp(node.host.clone(), node.port),
        Some(_) => ConnectionAddr::TcpTls {
            host: node.host.clone(),
            port: node.port,
            insecure: false,
            tls_params: None,
        },
    }
}

/// The client for one node of `config`.
pub(crate) fn client(config: &RedisConfig, node: &HostPort) -> Result<Client, LockError> {
    let info = address(config, node)
        .into_connection_info()
        .map_err(|e| config_error(node, e))?
        .set_redis_settings(redis_settings(config));
    open_client(config, info).map_err(|e| config_error(node, e))
}

/// The client for `info`, with `config`'s TLS certificates on TLS URLs.
pub(crate) fn open_client(
    config: &RedisConfig,
    info: ConnectionInfo,
) -> redis::RedisResult<Client> {
    match &config.tls {
        None => Client::open(info),
        Some(tls) => Client::build_with_tls(info, certificates(tls)),
    }
}

fn redis_settings(config: &RedisConfig) -> RedisConnectionInfo {
    let mut settings = RedisConnectionInfo::default()
        .set_db(config.db)
        // RESP3: the server's push messages carry pub/sub, and a connection
        // manager listening for them reconnects even while idle.
        .set_protocol(ProtocolVersion::RESP3);
    if let Some(user) = &config.username {
        settings = settings.set_username(user);
    }
    if let Some(password) = &config.password {
        settings = settings.set_password(password.expose());
    }
    settings
}

/// rustls needs a process-wide crypto provider; install ring's unless the
/// application installed one.
pub(crate) fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Settings of a [`ConnectionManager`] for `config`.
pub(crate) fn manager_config(config: &RedisConfig) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.response_timeout))
        .set_number_of_retries(RECONNECT_RETRIES)
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(500))
}

/// Connections set up as the store's own, for tools that talk to the same
/// servers with raw commands, such as benchmarks. The store opens its own
/// connections with these too.
impl RedisConfig {
    /// A client set up as the store's own (same servers, timeouts,
    /// credentials, TLS) for `node`, one of [`nodes`](Self::nodes): a
    /// connection manager that connects on first use and reconnects by
    /// itself. For tools that talk to the same servers with raw commands,
    /// such as benchmarks.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidConfig`] if the client library refuses the
    /// address or the TLS files.
    pub fn connection_manager(&self, node: &HostPort) -> Result<ConnectionManager, LockError> {
        let client = client(self, node)?;
        ConnectionManager::new_lazy_with_config(client, manager_config(self))
            .map_err(|e| config_error(node, e))
    }

    /// A client set up as the store's own (same servers, timeouts,
    /// credentials, TLS) for a Redis Cluster: a connection to the cluster
    /// behind the seed [`nodes`](Self::nodes), routing each command by key
    /// slot. For tools that talk to the same servers with raw commands,
    /// such as benchmarks.
    ///
    /// # Errors
    ///
    /// [`LockError::Unavailable`] if no seed node answers within twice the
    /// connect and response timeouts, naming the seeds and why;
    /// [`LockError::InvalidConfig`] if the client library refuses the
    /// settings or the seeds are not Redis (or not TLS as the URL says);
    /// [`LockError::PermissionDenied`] for refused credentials.
    pub async fn cluster_connection(&self) -> Result<ClusterConnection, LockError> {
        use redis::cluster::{ClusterClientBuilder, ClusterConfig};
        let mut builder = ClusterClientBuilder::new(self.nodes.iter().map(|n| {
            ConnectionAddr::Tcp(n.host.clone(), n.port)
                .into_connection_info()
                .expect("a TCP address is always valid")
        }))
        .connection_timeout(self.connect_timeout)
        .response_timeout(self.response_timeout)
        .retries(2);
        if let Some(user) = &self.username {
            builder = builder.username(user);
        }
        if let Some(password) = &self.password {
            builder = builder.password(password.expose());
        }
        if let Some(tls) = &self.tls {
            builder = builder.tls(redis::TlsMode::Secure).certs(certificates(tls));
        }
        let seeds = self
            .nodes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let client = builder
            .build()
            .map_err(|e| LockError::invalid_config(format!("Redis Cluster {seeds}: {e}")))?;
        let cluster_config = ClusterConfig::new()
            .set_connection_timeout(self.connect_timeout)
            .set_response_timeout(self.response_timeout);
        let connecting = client.get_async_connection_with_config(cluster_config);
        let error = match tokio::time::timeout(Timeouts::new(self).overall * 2, connecting).await {
            Ok(Ok(conn)) => return Ok(conn),
            Ok(Err(e)) => map_error(&format!("connect to Redis Cluster {seeds}"), e),
            Err(_) => LockError::Unavailable {
                message: format!("connect to Redis Cluster {seeds}: timed out"),
                source: None,
            },
        };
        let protocol = crate::diagnosis::protocol(self);
        Err(crate::diagnosis::explain(self, protocol, &self.nodes, error).await)
    }
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

fn timed_out(what: &str, after: Duration) -> LockError {
    LockError::Unavailable {
        message: format!("{what}: no reply within {after:?}"),
        source: None,
    }
}

fn config_error(node: &HostPort, error: RedisError) -> LockError {
    LockError::invalid_config(format!("Redis at {node}: {error}"))
}

/// Maps a client error: network trouble, timeouts and a server that is
/// loading, failing over, down or (no longer) a replica are `Unavailable`
/// (retriable); refused credentials or permissions are `PermissionDenied`
/// (the credentials or the user's ACL must change); the rest is
/// `Backend`. Messages say the cause in plain words; client errors carry
/// no credentials.
pub(crate) fn map_error(what: &str, error: RedisError) -> LockError {
    use redis::{ErrorKind, ServerErrorKind};
    let unavailable = error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || matches!(
            error.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(
                    ServerErrorKind::BusyLoading
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::ReadOnly
                        | ServerErrorKind::Moved
                        | ServerErrorKind::Ask
                )
        );
    let message = format!("{what}: {}", in_words(&error));
    if unavailable {
        LockError::unavailable(message, error)
    } else if matches!(error.kind(), ErrorKind::AuthenticationFailed)
        || matches!(error.code(), Some("WRONGPASS" | "NOAUTH"))
    {
        LockError::permission_denied(
            format!(
                "{message} (the server refused the user name or password: check them in the URL)"
            ),
            error,
        )
    } else if error.code() == Some("NOPERM") || denied_inside_a_script(&error) {
        LockError::permission_denied(
            format!(
                "{message} (the user's ACL does not allow what the lock needs: grant the \
                 commands and key patterns the lock-redis README lists)"
            ),
            error,
        )
    } else {
        LockError::backend(message, error)
    }
}

/// A client error in plain words: an I/O error by its kind ("connection
/// refused"), anything else as the client says it.
fn in_words(error: &RedisError) -> String {
    match error.is_io_error() {
        true => {
            lock_core::backend::diagnose::root_cause(error).unwrap_or_else(|| error.to_string())
        }
        false => error.to_string(),
    }
}

/// A command of one of our scripts refused by the user's ACL: Redis says
/// so in the script's error, without the NOPERM code.
fn denied_inside_a_script(error: &RedisError) -> bool {
    error
        .to_string()
        .contains("user executing the script can't run this command")
}

/// Runs `call` within the overall bound of `timeouts`; a failure or a
/// timeout becomes a [`LockError`] naming `what` was being done.
pub(crate) async fn bounded<T>(
    what: &str,
    timeouts: Timeouts,
    call: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, LockError> {
    within(what, timeouts, async {
        call.await.map_err(|e| map_error(what, e))
    })
    .await
}

/// `call` within the overall bound of `timeouts`; a timeout becomes an
/// `Unavailable` naming `what` was being done.
async fn within<T>(
    what: &str,
    timeouts: Timeouts,
    call: impl std::future::Future<Output = Result<T, LockError>>,
) -> Result<T, LockError> {
    tokio::time::timeout(timeouts.overall, call)
        .await
        .unwrap_or_else(|_| Err(timed_out(what, timeouts.overall)))
}
