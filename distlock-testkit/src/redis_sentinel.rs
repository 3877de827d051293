//! A Redis Sentinel deployment for tests: one master, one replica of it,
//! and three sentinels watching them under [`MASTER_NAME`] (quorum 2,
//! a master is down after 1 s without answers), with its
//! `redis+sentinel://` URL; optionally serving TLS too
//! ([`SentinelGroup::start_tls`], `rediss+sentinel://`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::OnceCell;

use crate::redis::{base_args, pong_probe, redis_server};
use crate::{eventually, probe, Server, ServerSpec};

/// The name the sentinels know the master by.
pub const MASTER_NAME: &str = "distlock";

/// How long the sentinels wait for a silent master before they agree it
/// is down and fail over to the replica. Sentinel's default is 30 s (and
/// 3 minutes for `failover-timeout`, set to 10 s here): the failover tests
/// would each wait that long. The data servers keep redis-server's
/// default limits.
pub const DOWN_AFTER: Duration = Duration::from_millis(1000);

/// The certificate files a TLS group's servers use: each serves TLS on
/// its extra port with `cert` and `key`, and the servers talk to each
/// other over TLS, trusting `ca` (`tls-replication yes`). Clients need
/// no certificate of their own (`tls-auth-clients no`).
#[derive(Debug, Clone)]
pub struct GroupTls {
    /// The CA that signed `cert`.
    pub ca: PathBuf,
    /// The servers' certificate (for `127.0.0.1`).
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

impl GroupTls {
    /// The TLS settings of a server whose TLS port is `tls_port`, as
    /// `(name, value)` pairs of its configuration.
    fn settings(&self, tls_port: u16) -> Vec<(&'static str, String)> {
        let file = |p: &PathBuf| p.display().to_string();
        vec![
            ("tls-port", tls_port.to_string()),
            ("tls-cert-file", file(&self.cert)),
            ("tls-key-file", file(&self.key)),
            ("tls-ca-cert-file", file(&self.ca)),
            ("tls-auth-clients", "no".to_owned()),
            ("tls-replication", "yes".to_owned()),
        ]
    }
}

/// A master, its replica and three sentinels, all on free loopback ports.
#[derive(Debug)]
pub struct SentinelGroup {
    /// The master the group started with (a failover may have made it a
    /// replica since).
    pub master: Server,
    /// The replica the group started with.
    pub replica: Server,
    /// The three sentinels.
    pub sentinels: Vec<Server>,
    /// Whether clients reach the group over TLS (on each server's extra
    /// port; the plain ports serve the readiness checks).
    pub tls: bool,
}

impl SentinelGroup {
    /// Starts the servers and waits until the replica is in sync and every
    /// sentinel knows the other two and the replica.
    pub async fn start(name: &str) -> Result<Self, String> {
        Self::start_with(name, None).await
    }

    /// [`start`](Self::start), with every server also serving TLS and
    /// the servers talking to each other over TLS: the sentinels name the
    /// master's TLS address.
    pub async fn start_tls(name: &str, tls: GroupTls) -> Result<Self, String> {
        Self::start_with(name, Some(tls)).await
    }

    async fn start_with(name: &str, tls: Option<GroupTls>) -> Result<Self, String> {
        let master = data_node_spec(&format!("{name}-master"), None, tls.clone())?
            .start()
            .await?;
        let watched_port = client_port(&master, tls.is_some());
        let replica_of = Some(watched_port);
        let replica = data_node_spec(&format!("{name}-replica"), replica_of, tls.clone())?
            .start()
            .await?;
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let spec = sentinel_spec(&format!("{name}-sentinel-{i}"), watched_port, tls.clone())?;
            sentinels.push(spec.start().await?);
        }
        let group = Self {
            master,
            replica,
            sentinels,
            tls: tls.is_some(),
        };
        group.wait_until_watched().await?;
        Ok(group)
    }

    /// The group's `redis+sentinel://` URL (`rediss+sentinel://` for a TLS
    /// group; no options).
    pub fn url(&self) -> String {
        let addrs = self
            .sentinels
            .iter()
            .map(|s| SocketAddr::from(([127, 0, 0, 1], client_port(s, self.tls))));
        let scheme = if self.tls { "rediss" } else { "redis" };
        let sentinels = crate::url::host_list(addrs);
        format!("{scheme}+sentinel://{sentinels}/{MASTER_NAME}")
    }

    /// The master's address as the first sentinel that answers names it.
    pub async fn master_addr(&self) -> Result<SocketAddr, String> {
        let mut problems = Vec::new();
        for sentinel in &self.sentinels {
            match master_addr_from(sentinel.addr()).await {
                Ok(addr) => return Ok(addr),
                Err(problem) => problems.push(problem),
            }
        }
        Err(problems.join("; "))
    }

    /// Waits (up to `within`) until the sentinels name a master other than
    /// `old`, and returns it: the failover is over.
    pub async fn wait_for_failover(
        &self,
        old: SocketAddr,
        within: Duration,
    ) -> Result<SocketAddr, String> {
        eventually(within, "the sentinels to name a new master", || async {
            match self.master_addr().await? {
                addr if addr != old => Ok(addr),
                _ => Err(format!("the sentinels still name {old}")),
            }
        })
        .await
    }

    /// The server (master or replica as started) whose client address
    /// (its TLS one in a TLS group) is `addr`.
    pub fn server_at(&self, addr: SocketAddr) -> Option<&Server> {
        [&self.master, &self.replica]
            .into_iter()
            .find(|server| client_port(server, self.tls) == addr.port())
    }

    async fn wait_until_watched(&self) -> Result<(), String> {
        let replica = self.replica.addr();
        eventually(
            Duration::from_secs(30),
            "the replica to sync",
            || async move { ask(replica, b"INFO replication\r\n", "master_link_status:up").await },
        )
        .await?;
        for sentinel in &self.sentinels {
            let addr = sentinel.addr();
            let question = format!("SENTINEL MASTER {MASTER_NAME}\r\n").into_bytes();
            for expect in [
                "num-other-sentinels\r\n$1\r\n2\r\n",
                "num-slaves\r\n$1\r\n1\r\n",
            ] {
                let question = &question;
                eventually(Duration::from_secs(30), expect, || async move {
                    ask(addr, question, expect).await
                })
                .await?;
            }
        }
        Ok(())
    }
}

/// This test binary's shared group, started on first use and kept for
/// the life of the process (like [`shared_server`](crate::shared_server)).
pub async fn shared_sentinel_group() -> Result<&'static SentinelGroup, String> {
    static GROUP: OnceCell<Result<&'static SentinelGroup, String>> = OnceCell::const_new();
    GROUP
        .get_or_init(|| async {
            let group = SentinelGroup::start("redis-sentinel").await?;
            Ok(&*Box::leak(Box::new(group)))
        })
        .await
        .clone()
}

/// The `redis+sentinel://` URL of this test binary's shared group.
pub async fn shared_sentinel_url() -> Result<String, String> {
    Ok(shared_sentinel_group().await?.url())
}

/// The port clients use: the TLS port (the extra one) in a TLS group.
fn client_port(server: &Server, tls: bool) -> u16 {
    if tls {
        server.ports()[1]
    } else {
        server.port()
    }
}

/// `redis-server` as `name`, with an extra port for TLS if `tls`.
fn redis_program(name: &str, tls: bool) -> Result<ServerSpec, String> {
    Ok(ServerSpec::new(name, redis_server()?).extra_ports(usize::from(tls)))
}

/// A `redis-server` without persistence: the master, or with `replica_of`
/// a replica of the master on that port; with `tls`, also serving TLS on
/// its extra port.
fn data_node_spec(
    name: &str,
    replica_of: Option<u16>,
    tls: Option<GroupTls>,
) -> Result<ServerSpec, String> {
    let spec = redis_program(name, tls.is_some())?.args(move |ctx| {
        let mut args = base_args(ctx.port, &ctx.data_dir);
        if let Some(port) = replica_of {
            args.extend(["--replicaof".into(), "127.0.0.1".into(), port.to_string()]);
        }
        if let Some(tls) = &tls {
            for (name, value) in tls.settings(ctx.ports[1]) {
                args.extend([format!("--{name}"), value]);
            }
        }
        args
    });
    Ok(pong_probe(spec))
}

/// A sentinel on a free port watching the master on `master_port`; with
/// `tls`, also serving TLS on its extra port and reaching the servers over
/// TLS. Its configuration file is written on the first launch only: a
/// restarted sentinel keeps what it learnt (it rewrites the file itself).
fn sentinel_spec(
    name: &str,
    master_port: u16,
    tls: Option<GroupTls>,
) -> Result<ServerSpec, String> {
    let spec = redis_program(name, tls.is_some())?.args(move |ctx| {
        let conf = ctx.data_dir.join("sentinel.conf");
        if !conf.exists() {
            let down_after = DOWN_AFTER.as_millis();
            let mut text = format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {dir}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} {down_after}\n\
                     sentinel failover-timeout {MASTER_NAME} 10000\n\
                     sentinel parallel-syncs {MASTER_NAME} 1\n",
                port = ctx.port,
                dir = ctx.data_dir.display(),
            );
            if let Some(tls) = &tls {
                for (name, value) in tls.settings(ctx.ports[1]) {
                    text.push_str(&format!("{name} {value}\n"));
                }
            }
            // A failed write shows as a sentinel that does not start.
            let _ = std::fs::write(&conf, text);
        }
        vec![conf.display().to_string(), "--sentinel".to_owned()]
    });
    Ok(pong_probe(spec))
}

/// Sends `question` to `addr` and waits (1 s at most) for an answer that
/// contains `expect`.
async fn ask(addr: SocketAddr, question: &[u8], expect: &str) -> Result<(), String> {
    tokio::time::timeout(
        Duration::from_secs(1),
        probe::tcp_request(addr, question, expect),
    )
    .await
    .map_err(|_| format!("{addr} did not answer {expect:?}"))?
}

/// The master's address as the sentinel at `sentinel` names it.
async fn master_addr_from(sentinel: SocketAddr) -> Result<SocketAddr, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let question = format!("SENTINEL GET-MASTER-ADDR-BY-NAME {MASTER_NAME}\r\n");
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(sentinel).await?;
        stream.write_all(question.as_bytes()).await?;
        let mut answer = Vec::new();
        let mut chunk = [0u8; 512];
        // `*2 $len host $len port`: five lines, each ended by CRLF.
        while answer.windows(2).filter(|w| w == b"\r\n").count() < 5 {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&chunk[..n]);
        }
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&answer).into_owned())
    };
    let answer = tokio::time::timeout(Duration::from_secs(1), exchange)
        .await
        .map_err(|_| format!("sentinel {sentinel} did not answer"))?
        .map_err(|e| format!("sentinel {sentinel}: {e}"))?;
    let lines: Vec<&str> = answer.split("\r\n").collect();
    match lines.as_slice() {
        ["*2", _, host, _, port, ..] => format!("{host}:{port}")
            .parse()
            .map_err(|e| format!("sentinel {sentinel} named {host}:{port}: {e}")),
        _ => Err(format!("sentinel {sentinel} answered {answer:?}")),
    }
}
