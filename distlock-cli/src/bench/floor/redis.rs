//! The Redis floor: raw `SET key v NX PX` then, where it took the key,
//! `DEL key`, on connections of its own of the store's kind (a lazily
//! connecting manager per server, or a cluster connection); Redlock runs
//! on every master at once and needs a majority.

use std::fmt;
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::{ClusterClientBuilder, ClusterConfig};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{
    Client, Cmd, ConnectionAddr, IntoConnectionInfo, ProtocolVersion, RedisConnectionInfo,
    RedisError,
};
use distlock::{LockError, LockName};
use lock_core::url::{HostPort, TlsFiles};
use lock_redis::{RedisConfig, RedisStore, Topology};

use super::{escape, taken, Floor, FloorProbe, PAYLOAD};

/// Lease of the floor's keys: long enough for a round trip, short enough
/// that a crashed benchmark leaves nothing behind for long.
const FLOOR_TTL_MS: u64 = 10_000;

/// The floor of a Redis URL, with the store's connection settings.
pub(super) async fn open(url: &str) -> Result<Floor, LockError> {
    let config = lock_core::url::parse::<RedisStore>(url)?.config;
    let conns = match config.topology {
        Topology::Single | Topology::Redlock => config
            .nodes
            .iter()
            .map(|node| manager(&config, node).map(Conn::Single))
            .collect::<Result<_, _>>()?,
        Topology::Cluster => vec![Conn::Cluster(cluster(&config).await?)],
    };
    Ok(Box::new(RedisFloor {
        conns,
        // A command may wait for a reconnect and then for its reply.
        limit: config.connect_timeout + config.response_timeout,
    }))
}

/// Where the floor writes for `name`: the store's key shape under a
/// prefix of its own (the store's keys all start `distlock:`), hash tag
/// included, so a cluster spreads the floor's keys as it spreads locks.
fn floor_key(name: &LockName) -> String {
    let (namespace, key) = (name.namespace().as_str(), name.key().as_str());
    format!("distlock-floor:{{{namespace}:{}}}", escape(key))
}

/// One server, or a cluster.
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

struct RedisFloor {
    conns: Vec<Conn>,
    limit: Duration,
}

impl RedisFloor {
    /// Runs `cmd` on `conn` within the store's bound for one command.
    async fn query<T: ::redis::FromRedisValue>(
        &self,
        conn: &Conn,
        cmd: &Cmd,
    ) -> Result<T, LockError> {
        let run = async {
            match conn.clone() {
                Conn::Single(mut c) => cmd.query_async(&mut c).await,
                Conn::Cluster(mut c) => cmd.query_async(&mut c).await,
            }
        };
        match tokio::time::timeout(self.limit, run).await {
            Ok(result) => result.map_err(|e| error("floor probe", e)),
            Err(_) => Err(LockError::Unavailable {
                message: format!("floor probe: no reply within {:?}", self.limit),
                source: None,
            }),
        }
    }
}

impl fmt::Debug for RedisFloor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisFloor")
            .field("servers", &self.conns.len())
            .finish()
    }
}

#[async_trait::async_trait]
impl FloorProbe for RedisFloor {
    fn describe(&self) -> String {
        match self.conns.len() {
            1 => "SET NX PX + DEL".to_owned(),
            n => format!("SET NX PX + DEL on {n} masters in parallel"),
        }
    }

    async fn lock_release_once(&self, name: &LockName) -> Result<(), LockError> {
        let key = floor_key(name);
        let mut set = ::redis::cmd("SET");
        set.arg(&key)
            .arg(PAYLOAD)
            .arg("NX")
            .arg("PX")
            .arg(FLOOR_TTL_MS);
        let mut del = ::redis::cmd("DEL");
        del.arg(&key);
        let (set, del) = (&set, &del);
        let runs = self.conns.iter().map(|conn| async move {
            let took: Option<String> = self.query(conn, set).await?;
            if took.is_none() {
                return Ok(false);
            }
            let _: i64 = self.query(conn, del).await?;
            Ok::<_, LockError>(true)
        });
        let mut took = 0;
        for outcome in futures_util::future::join_all(runs).await {
            took += usize::from(outcome?);
        }
        if took * 2 <= self.conns.len() {
            return Err(taken(format_args!("key `{key}`")));
        }
        Ok(())
    }
}

/// A connection manager for `node` that connects on first use, set up as
/// the store sets up its own.
fn manager(config: &RedisConfig, node: &HostPort) -> Result<ConnectionManager, LockError> {
    let addr = match &config.tls {
        None => ConnectionAddr::Tcp(node.host.clone(), node.port),
        Some(_) => ConnectionAddr::TcpTls {
            host: node.host.clone(),
            port: node.port,
            insecure: false,
            tls_params: None,
        },
    };
    let bad = |e: RedisError| LockError::invalid_config(format!("Redis at {node}: {e}"));
    let mut settings = RedisConnectionInfo::default()
        .set_db(config.db)
        .set_protocol(ProtocolVersion::RESP3);
    if let Some(user) = &config.username {
        settings = settings.set_username(user);
    }
    if let Some(password) = &config.password {
        settings = settings.set_password(password.expose());
    }
    let info = addr
        .into_connection_info()
        .map_err(bad)?
        .set_redis_settings(settings);
    let client = match &config.tls {
        None => Client::open(info),
        Some(tls) => Client::build_with_tls(info, certificates(tls)),
    }
    .map_err(bad)?;
    let manager = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.response_timeout))
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(500));
    ConnectionManager::new_lazy_with_config(client, manager).map_err(bad)
}

/// A connection to the cluster behind `config`'s seed nodes.
async fn cluster(config: &RedisConfig) -> Result<ClusterConnection, LockError> {
    let seeds = config.nodes.iter().map(|n| {
        ConnectionAddr::Tcp(n.host.clone(), n.port)
            .into_connection_info()
            .expect("a TCP address is always valid")
    });
    let mut builder = ClusterClientBuilder::new(seeds)
        .connection_timeout(config.connect_timeout)
        .response_timeout(config.response_timeout)
        .retries(2);
    if let Some(user) = &config.username {
        builder = builder.username(user);
    }
    if let Some(password) = &config.password {
        builder = builder.password(password.expose());
    }
    if let Some(tls) = &config.tls {
        builder = builder
            .tls(::redis::TlsMode::Secure)
            .certs(certificates(tls));
    }
    let what = "connect the floor probe to Redis Cluster";
    let client = builder
        .build()
        .map_err(|e| LockError::invalid_config(format!("{what}: {e}")))?;
    let connecting = client.get_async_connection_with_config(
        ClusterConfig::new()
            .set_connection_timeout(config.connect_timeout)
            .set_response_timeout(config.response_timeout),
    );
    let limit = (config.connect_timeout + config.response_timeout) * 2;
    match tokio::time::timeout(limit, connecting).await {
        Ok(connected) => connected.map_err(|e| error(what, e)),
        Err(_) => Err(LockError::Unavailable {
            message: format!("{what}: timed out"),
            source: None,
        }),
    }
}

/// The CA to trust and the client certificate, for the client library.
fn certificates(tls: &TlsFiles) -> ::redis::TlsCertificates {
    // rustls needs one process-wide crypto provider; ring, as the store.
    let _ = rustls::crypto::ring::default_provider().install_default();
    ::redis::TlsCertificates {
        client_tls: tls.identity.as_ref().map(|id| ::redis::ClientTlsConfig {
            client_cert: id.cert.bytes().to_vec(),
            client_key: id.key.bytes().to_vec(),
        }),
        root_cert: tls.ca.as_ref().map(|ca| ca.bytes().to_vec()),
    }
}

/// Network trouble is `Unavailable`, the rest `Backend`.
fn error(what: &str, error: RedisError) -> LockError {
    let message = format!("{what}: {error}");
    if error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
    {
        LockError::unavailable(message, error)
    } else {
        LockError::backend(message, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_key_is_outside_the_stores_keys() {
        let name = LockName::parse("billing", "invoices/2026").unwrap();
        let key = floor_key(&name);
        assert_eq!(key, "distlock-floor:{billing:invoices%2F2026}");
        assert!(!key.starts_with("distlock:"), "{key}");
    }

    #[tokio::test]
    async fn every_topology_opens_without_a_server() {
        for (url, describe) in [
            ("redis://127.0.0.1:1", "SET NX PX + DEL"),
            (
                "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
                "SET NX PX + DEL on 3 masters in parallel",
            ),
        ] {
            let probe = super::super::open(url).await.unwrap().unwrap();
            assert_eq!(probe.describe(), describe);
        }
    }
}
