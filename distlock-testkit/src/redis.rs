//! Redis servers for tests: a single instance, a cluster of masters, and
//! independent masters for Redlock, with their URLs.
//!
//! A single instance can also come from `DISTLOCK_TEST_REDIS_URL` (a
//! `redis://` URL) instead of being spawned. With the `redis` feature,
//! `waiters_in_line` reads a lock's queue with a raw client.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::OnceCell;

use crate::{
    env_override, eventually, find_program, install_hint, probe, shared_server, Server, ServerSpec,
    REDIS_URL_VAR,
};

/// URL options that make a locker fail fast on an unreachable server.
pub const TEST_TIMEOUTS: &str = "connect_timeout=1s&response_timeout=500ms";

pub(crate) fn redis_server() -> Result<std::path::PathBuf, String> {
    find_program(
        &["redis-server"],
        &install_hint("redis-server", REDIS_URL_VAR),
    )
}

/// Ready once the server answers `PING`.
pub(crate) fn pong_probe(spec: ServerSpec) -> ServerSpec {
    spec.probe(|ctx| Box::pin(probe::tcp_request(ctx.addr(), b"PING\r\n", "+PONG")))
}

/// A `redis-server` on a free port, without persistence (a restart loses
/// every key, like a crashed server with no AOF).
pub fn redis_spec(name: &str) -> Result<ServerSpec, String> {
    let spec =
        ServerSpec::new(name, redis_server()?).args(|ctx| base_args(ctx.port, &ctx.data_dir));
    Ok(pong_probe(spec))
}

/// A `redis-server` on a free port that persists every write before it
/// answers (AOF with `appendfsync always`), so a restart keeps its locks
/// and fencing counters, as production setups that rely on fencing must.
pub fn redis_aof_spec(name: &str) -> Result<ServerSpec, String> {
    let spec = ServerSpec::new(name, redis_server()?).args(|ctx| {
        let mut args = base_args(ctx.port, &ctx.data_dir);
        // Later arguments win over the base's `--appendonly no`.
        for (flag, value) in [("--appendonly", "yes"), ("--appendfsync", "always")] {
            args.extend([flag.to_owned(), value.to_owned()]);
        }
        args
    });
    Ok(pong_probe(spec))
}

/// A `redis-server` that is one master of a cluster; its bus port is the
/// spec's extra port.
pub fn cluster_node_spec(name: &str) -> Result<ServerSpec, String> {
    let spec = ServerSpec::new(name, redis_server()?)
        .extra_ports(1)
        .args(|ctx| {
            let mut args = base_args(ctx.port, &ctx.data_dir);
            let nodes_conf = ctx.data_dir.join("nodes.conf").display().to_string();
            let bus_port = ctx.ports[1].to_string();
            // The node timeout is 5 s instead of Redis's 15 s so that the
            // failover tests see a replica replace a killed master within
            // seconds. Every other limit (maxclients, maxmemory, client
            // timeout, request sizes) is redis-server's default.
            for (flag, value) in [
                ("--cluster-enabled", "yes"),
                ("--cluster-config-file", &nodes_conf),
                ("--cluster-port", &bus_port),
                ("--cluster-node-timeout", "5000"),
            ] {
                args.extend([flag.to_owned(), value.to_owned()]);
            }
            args
        });
    Ok(pong_probe(spec))
}

/// A `redis-server` that serves clients over TLS on its extra port (the
/// server's `ports()[1]`), with `cert`/`key` as its certificate, requiring
/// client certificates signed by `ca` (`tls-auth-clients yes`) and the
/// password `password` (`requirepass`). Its plain port serves only the
/// readiness probe, which logs in with the password.
pub fn redis_tls_spec(
    name: &str,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    password: &str,
) -> Result<ServerSpec, String> {
    let probe_login = format!("AUTH {password}\r\nPING\r\n").into_bytes();
    let password = password.to_owned();
    Ok(ServerSpec::new(name, redis_server()?)
        .extra_ports(1)
        .args(move |ctx| {
            let mut args = base_args(ctx.port, &ctx.data_dir);
            let file = |p: &PathBuf| p.display().to_string();
            for (flag, value) in [
                ("--tls-port", ctx.ports[1].to_string()),
                ("--tls-cert-file", file(&cert)),
                ("--tls-key-file", file(&key)),
                ("--tls-ca-cert-file", file(&ca)),
                ("--tls-auth-clients", "yes".to_owned()),
                ("--requirepass", password.clone()),
            ] {
                args.extend([flag.to_owned(), value]);
            }
            args
        })
        .probe(move |ctx| {
            let (addr, login) = (ctx.addr(), probe_login.clone());
            Box::pin(async move { probe::tcp_request(addr, &login, "+PONG").await })
        }))
}

/// Arguments every test Redis shares. None changes a limit (maxclients,
/// maxmemory, client timeout, request sizes stay redis-server's
/// defaults): persistence is off unless a spec turns AOF on, and
/// protected mode is moot on a server bound to loopback.
pub(crate) fn base_args(port: u16, data_dir: &Path) -> Vec<String> {
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

/// `masters` masters joined into a cluster with `redis-cli --cluster
/// create`, waited for until every node reports `cluster_state:ok`.
pub async fn start_cluster(masters: usize) -> Result<Vec<Server>, String> {
    start_cluster_with_replicas(masters, 0).await
}

/// A cluster of `masters` masters with `replicas` replicas each (so
/// `masters * (1 + replicas)` nodes; which node becomes a replica is
/// `redis-cli`'s choice), waited for until every node reports
/// `cluster_state:ok`. A master killed for longer than the node timeout
/// (5 s) is replaced by one of its replicas.
pub async fn start_cluster_with_replicas(
    masters: usize,
    replicas: usize,
) -> Result<Vec<Server>, String> {
    let mut servers = Vec::new();
    for i in 0..masters * (1 + replicas) {
        let spec = cluster_node_spec(&format!("redis-cluster-{i}"))?;
        servers.push(spec.start().await?);
    }
    let cli = find_program(&["redis-cli"], &install_hint("redis-tools", REDIS_URL_VAR))?;
    let mut command = std::process::Command::new(cli);
    command.arg("--cluster").arg("create");
    command.args(servers.iter().map(|server| server.addr().to_string()));
    command.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
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

/// The `redis+cluster://` URL of this test binary's shared 3-master
/// cluster, started on first use.
pub async fn shared_cluster_url() -> Result<String, String> {
    static CLUSTER: OnceCell<Result<String, String>> = OnceCell::const_new();
    CLUSTER
        .get_or_init(|| async {
            let servers = start_cluster(3).await?;
            let url = cluster_url(servers.iter().map(Server::addr));
            // Kept for the life of the process, like shared_server does.
            Box::leak(Box::new(servers));
            Ok(url)
        })
        .await
        .clone()
}

/// `n` independent masters for Redlock, started once per test binary (the
/// first call's `n` counts).
pub async fn shared_redlock_servers(n: usize) -> Result<&'static [Server], String> {
    static MASTERS: OnceCell<Result<&'static [Server], String>> = OnceCell::const_new();
    MASTERS
        .get_or_init(|| async move {
            let servers = start_masters("redlock", n).await?;
            Ok(&*Box::leak(servers.into_boxed_slice()))
        })
        .await
        .clone()
}

/// `n` independent masters named `<name>-0`, `<name>-1`, ..., started one
/// after the other.
pub async fn start_masters(name: &str, n: usize) -> Result<Vec<Server>, String> {
    let mut servers = Vec::with_capacity(n);
    for i in 0..n {
        servers.push(redis_spec(&format!("{name}-{i}"))?.start().await?);
    }
    Ok(servers)
}

/// The `redlock://` URL of the masters at `addrs`.
pub fn redlock_url(addrs: impl IntoIterator<Item = SocketAddr>) -> String {
    format!("redlock://{}", crate::url::host_list(addrs))
}

/// The `redis+cluster://` URL of the cluster nodes at `addrs`.
pub fn cluster_url(addrs: impl IntoIterator<Item = SocketAddr>) -> String {
    format!("redis+cluster://{}", crate::url::host_list(addrs))
}

/// The owner ids in line for lock `name`, in order, without the places
/// their waiters already gave up, read with a raw connection (to a single
/// instance or a cluster) from the keys [`layout::RedisKeys`] names.
///
/// [`layout::RedisKeys`]: crate::layout::RedisKeys
#[cfg(feature = "redis")]
pub async fn waiters_in_line<C>(
    raw: &mut C,
    name: &lock_core::LockName,
) -> ::redis::RedisResult<Vec<String>>
where
    C: ::redis::aio::ConnectionLike + Send,
{
    let keys = crate::layout::RedisKeys::of(name);
    let line: Vec<String> = ::redis::cmd("LRANGE")
        .arg(&keys.queue)
        .arg(0)
        .arg(-1)
        .query_async(raw)
        .await?;
    let places: Vec<String> = ::redis::cmd("HKEYS")
        .arg(&keys.waiters)
        .query_async(raw)
        .await?;
    Ok(line.into_iter().filter(|o| places.contains(o)).collect())
}
