//! Building clients from a [`RedisConfig`]: addresses, credentials, TLS
//! certificates and the connection manager's settings, for the store's
//! own connections and for tools that talk to the same servers.

use std::time::Duration;

use lock_core::url::{HostPort, TlsFiles};
use lock_core::LockError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{
    Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, ProtocolVersion,
    RedisConnectionInfo, RedisError,
};

use crate::config::RedisConfig;
use crate::deadline::Timeouts;
use crate::errors::map_error;

/// How many times the connection manager retries a reconnect before the
/// waiting commands fail (the next command starts a new round). Kept low
/// so a dead server gives `Unavailable` promptly.
const RECONNECT_RETRIES: usize = 2;

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

/// A client library's refusal of `node`'s address or settings.
fn config_error(node: &HostPort, error: RedisError) -> LockError {
    LockError::invalid_config(format!("Redis at {node}: {error}"))
}
