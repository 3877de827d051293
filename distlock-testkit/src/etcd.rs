//! etcd servers for tests: a single member (plain or TLS-only with client
//! certificates) and a 3-member cluster, with their URLs.
//!
//! The single member can also come from `DISTLOCK_TEST_ETCD_URL` (an
//! `etcd://` URL) instead of being spawned. With the `etcd` feature,
//! `raw_client` and `holder_entry` act on locks from outside distlock.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio::sync::OnceCell;

use crate::{
    env_override, find_program, free_ports, install_hint, probe, shared_server, Server, ServerSpec,
    ETCD_URL_VAR,
};

/// URL options that make a locker fail fast on an unreachable cluster.
pub const TEST_TIMEOUTS: &str = "connect_timeout=1s&response_timeout=2s";

/// etcd's client port when a URL names none.
pub const DEFAULT_PORT: u16 = 2379;

fn etcd_program() -> Result<PathBuf, String> {
    find_program(&["etcd"], &install_hint("etcd-server", ETCD_URL_VAR))
}

/// The readiness probe: `GET /health` answers `"health":"true"` once the
/// member serves requests (in a cluster: once there is a leader).
fn health_probe(spec: ServerSpec) -> ServerSpec {
    spec.probe(|ctx| {
        Box::pin(probe::tcp_request(
            ctx.addr(),
            b"GET /health HTTP/1.0\r\n\r\n",
            "\"health\":\"true\"",
        ))
    })
}

/// One etcd member alone in its cluster, client port first, peer port
/// second. With `fsync` false it runs with `--unsafe-no-fsync` (faster,
/// for servers on which no crash is simulated); benchmarks must say which
/// they measured.
pub fn etcd_spec(name: &str, fsync: bool) -> Result<ServerSpec, String> {
    let spec = ServerSpec::new(name, etcd_program()?)
        .extra_ports(1)
        .args(move |ctx| {
            let client = format!("http://127.0.0.1:{}", ctx.port);
            let peer = format!("http://127.0.0.1:{}", ctx.ports[1]);
            let mut args = member_args("n1", &ctx.data_dir, &client, &peer);
            args.extend(["--initial-cluster".into(), format!("n1={peer}")]);
            if !fsync {
                args.push("--unsafe-no-fsync".into());
            }
            args
        });
    Ok(health_probe(spec))
}

/// One member serving clients over TLS only, requiring client
/// certificates signed by `ca` (`--client-cert-auth`), with `cert`/`key`
/// as its server certificate. Ready once it accepts TCP connections (the
/// health probe speaks plain HTTP); it may need a moment more to elect
/// itself leader.
pub fn etcd_tls_spec(
    name: &str,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
) -> Result<ServerSpec, String> {
    Ok(ServerSpec::new(name, etcd_program()?)
        .extra_ports(1)
        .args(move |ctx| {
            let client = format!("https://127.0.0.1:{}", ctx.port);
            let peer = format!("http://127.0.0.1:{}", ctx.ports[1]);
            let mut args = member_args("n1", &ctx.data_dir, &client, &peer);
            let file = |p: &PathBuf| p.display().to_string();
            args.extend([
                "--initial-cluster".into(),
                format!("n1={peer}"),
                "--client-cert-auth".into(),
                "--trusted-ca-file".into(),
                file(&ca),
                "--cert-file".into(),
                file(&cert),
                "--key-file".into(),
                file(&key),
                "--unsafe-no-fsync".into(),
            ]);
            args
        }))
}

/// The arguments every test member shares. None changes a limit: request
/// size (`--max-request-bytes`), backend quota, transaction size,
/// concurrent streams, election and heartbeat timeouts and (no)
/// auto-compaction are etcd's defaults; only the log is quieter. Specs
/// that skip fsync say so (`--unsafe-no-fsync` changes durability, not
/// what a client may ask).
fn member_args(name: &str, data_dir: &Path, client: &str, peer: &str) -> Vec<String> {
    [
        "--name",
        name,
        "--data-dir",
        &data_dir.display().to_string(),
        "--listen-client-urls",
        client,
        "--advertise-client-urls",
        client,
        "--listen-peer-urls",
        peer,
        "--initial-advertise-peer-urls",
        peer,
        "--initial-cluster-state",
        "new",
        "--logger",
        "zap",
        "--log-level",
        "error",
    ]
    .map(String::from)
    .to_vec()
}

/// Starts a 3-member cluster on free ports and waits until every member
/// reports healthy (which needs an elected leader). Member `i` is named
/// `n{i+1}`; a member restarted with [`Server::restart`] rejoins with its
/// data dir.
pub async fn start_cluster(name: &str, fsync: bool) -> Result<Vec<Server>, String> {
    let program = etcd_program()?;
    let peers = free_ports(3).map_err(|e| format!("no free ports: {e}"))?;
    let cluster: Vec<String> = peers
        .iter()
        .enumerate()
        .map(|(i, port)| format!("n{}=http://127.0.0.1:{port}", i + 1))
        .collect();
    let cluster = cluster.join(",");
    let token = format!("{name}-{}", std::process::id());
    let specs: Vec<ServerSpec> = (0..3)
        .map(|i| {
            let (cluster, token, peer_port) = (cluster.clone(), token.clone(), peers[i]);
            let spec =
                ServerSpec::new(format!("{name}-n{}", i + 1), program.clone()).args(move |ctx| {
                    let client = format!("http://127.0.0.1:{}", ctx.port);
                    let peer = format!("http://127.0.0.1:{peer_port}");
                    let member = format!("n{}", i + 1);
                    let mut args = member_args(&member, &ctx.data_dir, &client, &peer);
                    args.extend([
                        "--initial-cluster".into(),
                        cluster.clone(),
                        "--initial-cluster-token".into(),
                        token.clone(),
                    ]);
                    if !fsync {
                        args.push("--unsafe-no-fsync".into());
                    }
                    args
                });
            health_probe(spec)
        })
        .collect();
    // Started together: no member is healthy before a quorum is up.
    let [a, b, c]: [ServerSpec; 3] = specs.try_into().map_err(|_| "three specs".to_owned())?;
    let (a, b, c) = tokio::try_join!(a.start(), b.start(), c.start())?;
    Ok(vec![a, b, c])
}

/// The `etcd://` URL of the members at `addrs`.
pub fn etcd_url(addrs: impl IntoIterator<Item = SocketAddr>) -> String {
    format!("etcd://{}", crate::url::host_list(addrs))
}

/// The URL of the shared single member of this test binary:
/// `DISTLOCK_TEST_ETCD_URL` if set, else a member started on first use.
pub async fn shared_etcd_url() -> Result<String, String> {
    if let Some(url) = env_override(ETCD_URL_VAR) {
        return Ok(url);
    }
    let server = shared_server("etcd-single", || etcd_spec("etcd", false)).await?;
    Ok(etcd_url([server.addr()]))
}

/// The members of this test binary's shared 3-member cluster, started on
/// first use.
pub async fn shared_cluster() -> Result<&'static [Server], String> {
    static CLUSTER: OnceCell<Result<&'static [Server], String>> = OnceCell::const_new();
    CLUSTER
        .get_or_init(|| async {
            let servers = start_cluster("etcd-cluster", false).await?;
            // Kept for the life of the process, like shared_server does.
            Ok(&*Box::leak(servers.into_boxed_slice()))
        })
        .await
        .clone()
}

/// A plain etcd client on the members of an `etcd://` URL, for acting
/// from outside distlock (deleting keys, revoking leases).
#[cfg(feature = "etcd")]
pub async fn raw_client(url: &str) -> Result<etcd_client::Client, etcd_client::Error> {
    let endpoints: Vec<String> = crate::url::url_hosts(url)
        .into_iter()
        .map(|host| crate::url::with_default_port(host, DEFAULT_PORT))
        .collect();
    etcd_client::Client::connect(endpoints, None).await
}

/// How many keys are under `prefix`, counted with a raw client.
#[cfg(feature = "etcd")]
pub async fn keys_under(
    client: &etcd_client::Client,
    prefix: &str,
) -> Result<i64, etcd_client::Error> {
    let count_only = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    let response = client.kv_client().get(prefix, Some(count_only)).await?;
    Ok(response.count())
}

/// The holder's queue entry of lock `name` (the oldest key under its
/// [queue prefix](crate::layout::etcd_queue_prefix)): its key and lease
/// id, `None` if nobody holds or waits.
#[cfg(feature = "etcd")]
pub async fn holder_entry(
    client: &etcd_client::Client,
    name: &lock_core::LockName,
) -> Result<Option<(Vec<u8>, i64)>, etcd_client::Error> {
    use etcd_client::{GetOptions, SortOrder, SortTarget};

    let oldest = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1);
    let prefix = crate::layout::etcd_queue_prefix(name);
    let response = client.kv_client().get(prefix, Some(oldest)).await?;
    Ok(response
        .kvs()
        .first()
        .map(|kv| (kv.key().to_vec(), kv.lease())))
}
