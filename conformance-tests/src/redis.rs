//! Redis test servers (single instance, 3-master cluster, independent
//! Redlock masters) and the conformance factories that open lockers on
//! them through `distlock::connect`.
//!
//! A single instance and a cluster can also come from
//! `DISTLOCK_TEST_REDIS_URL` (a `redis://` URL) instead of being spawned.

use std::net::SocketAddr;
use std::time::Duration;

use distlock::conformance::{case_url, CaseSettings, LockerFactory, Outage};
use distlock::{async_trait, LockError, Locker};

use crate::harness::{
    env_override, eventually, find_program, install_hint, probe, shared_server, Server, ServerSpec,
    REDIS_URL_VAR,
};
use crate::outage::ProxyOutage;

/// Timeouts the test lockers use, so an unreachable server fails fast.
pub const TEST_TIMEOUTS: &str = "connect_timeout=1s&response_timeout=500ms";

/// A `redis-server` on a free port, without persistence (a restart loses
/// every key, like a crashed server with no AOF).
pub fn redis_spec(name: &str) -> Result<ServerSpec, String> {
    let program = find_program(
        &["redis-server"],
        &install_hint("redis-server", REDIS_URL_VAR),
    )?;
    Ok(ServerSpec::new(name, program)
        .args(|ctx| base_args(ctx.port, &ctx.data_dir))
        .probe(|ctx| Box::pin(probe::tcp_request(ctx.addr(), b"PING\r\n", "+PONG"))))
}

/// A `redis-server` that is one master of a cluster; its bus port is the
/// spec's extra port.
pub fn cluster_node_spec(name: &str) -> Result<ServerSpec, String> {
    let program = find_program(
        &["redis-server"],
        &install_hint("redis-server", REDIS_URL_VAR),
    )?;
    Ok(ServerSpec::new(name, program)
        .extra_ports(1)
        .args(|ctx| {
            let mut args = base_args(ctx.port, &ctx.data_dir);
            let nodes_conf = ctx.data_dir.join("nodes.conf").display().to_string();
            args.extend(
                [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &nodes_conf,
                    "--cluster-port",
                    &ctx.ports[1].to_string(),
                    "--cluster-node-timeout",
                    "5000",
                ]
                .map(String::from),
            );
            args
        })
        .probe(|ctx| Box::pin(probe::tcp_request(ctx.addr(), b"PING\r\n", "+PONG"))))
}

fn base_args(port: u16, data_dir: &std::path::Path) -> Vec<String> {
    [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--dir",
        &data_dir.display().to_string(),
        "--save",
        "",
        "--appendonly",
        "no",
        "--protected-mode",
        "no",
    ]
    .map(String::from)
    .to_vec()
}

/// The `redis://` URL of the shared single instance of this test binary:
/// `DISTLOCK_TEST_REDIS_URL` if set, else a server started on first use.
pub async fn shared_redis_url() -> Result<String, String> {
    if let Some(url) = env_override(REDIS_URL_VAR) {
        return Ok(url);
    }
    let server = shared_server("redis-single", || redis_spec("redis")).await?;
    Ok(format!("redis://{}", server.addr()))
}

/// Three masters joined into a cluster with `redis-cli --cluster create`,
/// waited for until every node reports `cluster_state:ok`.
pub async fn start_cluster(masters: usize) -> Result<Vec<Server>, String> {
    let mut servers = Vec::new();
    for i in 0..masters {
        servers.push(
            cluster_node_spec(&format!("redis-cluster-{i}"))?
                .start()
                .await?,
        );
    }
    let cli = find_program(&["redis-cli"], &install_hint("redis-tools", REDIS_URL_VAR))?;
    let mut command = std::process::Command::new(cli);
    command.arg("--cluster").arg("create");
    for server in &servers {
        command.arg(server.addr().to_string());
    }
    command.args(["--cluster-replicas", "0", "--cluster-yes"]);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("redis-cli --cluster create: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    for server in &servers {
        let addr = server.addr();
        eventually(Duration::from_secs(30), "cluster_state:ok", || async move {
            tokio::time::timeout(
                Duration::from_millis(500),
                probe::tcp_request(addr, b"CLUSTER INFO\r\n", "cluster_state:ok"),
            )
            .await
            .map_err(|_| "cluster not ok yet".to_owned())?
        })
        .await?;
    }
    Ok(servers)
}

/// The `redis+cluster://` URL of this test binary's shared 3-master cluster.
pub async fn shared_cluster_url() -> Result<String, String> {
    use tokio::sync::OnceCell;
    static CLUSTER: OnceCell<Result<String, String>> = OnceCell::const_new();
    CLUSTER
        .get_or_init(|| async {
            let servers = start_cluster(3).await?;
            let hosts: Vec<String> = servers.iter().map(|s| s.addr().to_string()).collect();
            // Kept for the life of the process, like shared_server does.
            Box::leak(Box::new(servers));
            Ok(format!("redis+cluster://{}", hosts.join(",")))
        })
        .await
        .clone()
}

/// `n` independent masters for Redlock, started once per test binary.
pub async fn shared_redlock_servers(n: usize) -> Result<&'static [Server], String> {
    use tokio::sync::OnceCell;
    static MASTERS: OnceCell<Result<&'static [Server], String>> = OnceCell::const_new();
    MASTERS
        .get_or_init(|| async move {
            let mut servers = Vec::new();
            for i in 0..n {
                servers.push(redis_spec(&format!("redlock-{i}"))?.start().await?);
            }
            Ok(&*Box::leak(servers.into_boxed_slice()))
        })
        .await
        .clone()
}

/// The `redlock://` URL of `servers`.
pub fn redlock_url(addrs: impl IntoIterator<Item = SocketAddr>) -> String {
    let hosts: Vec<String> = addrs.into_iter().map(|a| a.to_string()).collect();
    format!("redlock://{}", hosts.join(","))
}

/// Adds the case's ttl and namespace and the test timeouts to `base`.
pub fn url_with(base: &str, settings: &CaseSettings) -> String {
    case_url(&crate::with_query(base, TEST_TIMEOUTS), settings)
}

/// Opens lockers on a Redis URL; for the outage case it puts a
/// [`FaultProxy`](crate::harness::FaultProxy) in front of each server of `proxied` and cuts them.
#[derive(Debug, Clone)]
pub struct RedisFactory {
    /// The URL lockers are opened on.
    pub base: String,
    /// Scheme and servers to reach through proxies in the outage case
    /// (`None`: the case is not applicable).
    pub proxied: Option<(&'static str, Vec<SocketAddr>)>,
}

#[async_trait]
impl LockerFactory for RedisFactory {
    async fn open(&self, settings: &CaseSettings) -> Result<Locker, LockError> {
        distlock::connect(&url_with(&self.base, settings)).await
    }

    async fn open_with_outage(
        &self,
        settings: &CaseSettings,
    ) -> Option<Result<(Locker, Box<dyn Outage>), LockError>> {
        let (scheme, targets) = self.proxied.as_ref()?;
        let outage = match ProxyOutage::start(targets) {
            Ok(outage) => outage,
            Err(e) => return Some(Err(e)),
        };
        let hosts: Vec<String> = outage.addrs().iter().map(ToString::to_string).collect();
        let url = url_with(&format!("{scheme}://{}", hosts.join(",")), settings);
        let outage: Box<dyn Outage> = Box::new(outage);
        Some(distlock::connect(&url).await.map(|locker| (locker, outage)))
    }
}
