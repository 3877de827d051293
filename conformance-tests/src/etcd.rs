//! etcd test servers (a single member, a 3-member cluster) and the
//! conformance factory that opens lockers on them through
//! `distlock::connect`.
//!
//! The single member can also come from `DISTLOCK_TEST_ETCD_URL` (an
//! `etcd://` URL) instead of being spawned.

use std::net::SocketAddr;
use std::path::PathBuf;

use distlock::conformance::{case_url, CaseSettings, LockerFactory, Outage};
use distlock::lock_etcd::keys::queue_prefix;
use distlock::{async_trait, LockError, Locker};
use etcd_client::{Client, GetOptions, SortOrder, SortTarget};
use tokio::sync::OnceCell;

use crate::harness::{
    env_override, find_program, free_ports, install_hint, probe, shared_server, Server, ServerSpec,
    ETCD_URL_VAR,
};
use crate::outage::ProxyOutage;

/// Timeouts the test lockers use, so an unreachable cluster fails fast.
pub const TEST_TIMEOUTS: &str = "connect_timeout=1s&response_timeout=2s";

fn etcd_program() -> Result<std::path::PathBuf, String> {
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
/// second. With `fsync` false it runs with `--unsafe-no-fsync` (suite
/// servers: faster, and a crash is never simulated on them); benchmarks
/// that compare against the floor must say which they measured.
pub fn etcd_spec(name: &str, fsync: bool) -> Result<ServerSpec, String> {
    let program = etcd_program()?;
    let spec = ServerSpec::new(name, program)
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
    let program = etcd_program()?;
    Ok(ServerSpec::new(name, program)
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

fn member_args(name: &str, data_dir: &std::path::Path, client: &str, peer: &str) -> Vec<String> {
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

/// The `etcd://` URL of `addrs`.
pub fn etcd_url(addrs: impl IntoIterator<Item = SocketAddr>) -> String {
    let hosts: Vec<String> = addrs.into_iter().map(|a| a.to_string()).collect();
    format!("etcd://{}", hosts.join(","))
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

/// The members of this test binary's shared 3-member cluster.
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

/// Adds the case's ttl and namespace and the test timeouts to `base`.
pub fn url_with(base: &str, settings: &CaseSettings) -> String {
    case_url(&crate::with_query(base, TEST_TIMEOUTS), settings)
}

/// A plain etcd client on the members of an `etcd://` URL, for acting
/// from outside distlock (deleting keys, revoking leases).
pub async fn raw_client(url: &str) -> Result<Client, LockError> {
    let parsed = distlock::LockUrl::parse(url)?;
    let endpoints: Vec<String> = parsed.hosts.iter().map(|h| h.to_string()).collect();
    Client::connect(endpoints, None)
        .await
        .map_err(|e| LockError::backend("cannot connect a raw etcd client", e))
}

/// The holder's queue entry of `key` in `locker`'s namespace: key and
/// lease id, read with a raw client.
pub async fn holder_entry(
    client: &Client,
    locker: &Locker,
    key: &str,
) -> Result<Option<(Vec<u8>, i64)>, LockError> {
    let prefix = queue_prefix(&locker.name(key)?);
    let oldest = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1);
    let response = client
        .kv_client()
        .get(prefix, Some(oldest))
        .await
        .map_err(|e| LockError::backend("cannot read the queue", e))?;
    Ok(response
        .kvs()
        .first()
        .map(|kv| (kv.key().to_vec(), kv.lease())))
}

/// Opens lockers on an etcd URL. Takes locks away from outside by deleting
/// the holder's queue entry with a raw client; for the outage case it puts
/// a [`FaultProxy`](crate::harness::FaultProxy) in front of every member and cuts them.
#[derive(Debug, Clone)]
pub struct EtcdFactory {
    /// The URL lockers are opened on.
    pub base: String,
    /// The members, to reach through proxies in the outage case (empty:
    /// not applicable, e.g. for a server from `DISTLOCK_TEST_ETCD_URL`).
    pub members: Vec<SocketAddr>,
}

impl EtcdFactory {
    /// A factory on `base`, with outages through proxies to `members`.
    pub fn new(base: impl Into<String>, members: Vec<SocketAddr>) -> Self {
        Self {
            base: base.into(),
            members,
        }
    }
}

#[async_trait]
impl LockerFactory for EtcdFactory {
    async fn open(&self, settings: &CaseSettings) -> Result<Locker, LockError> {
        distlock::connect(&url_with(&self.base, settings)).await
    }

    async fn take_away(&self, locker: &Locker, key: &str) -> Option<Result<(), LockError>> {
        let taken = async {
            let client = raw_client(&self.base).await?;
            let Some((entry, _lease)) = holder_entry(&client, locker, key).await? else {
                return Err(LockError::invalid_config(format!("no holder of `{key}`")));
            };
            client
                .kv_client()
                .delete(entry, None)
                .await
                .map_err(|e| LockError::backend("cannot delete the holder's entry", e))?;
            Ok(())
        };
        Some(taken.await)
    }

    async fn open_with_outage(
        &self,
        settings: &CaseSettings,
    ) -> Option<Result<(Locker, Box<dyn Outage>), LockError>> {
        if self.members.is_empty() {
            return None;
        }
        let outage = match ProxyOutage::start(&self.members) {
            Ok(outage) => outage,
            Err(e) => return Some(Err(e)),
        };
        let url = url_with(&etcd_url(outage.addrs()), settings);
        let outage: Box<dyn Outage> = Box::new(outage);
        Some(distlock::connect(&url).await.map(|locker| (locker, outage)))
    }
}
