//! ZooKeeper for the tests: standalone servers and 3-server ensembles of
//! Debian's ZooKeeper 3.8, and the [`ZkFactory`] the conformance suite
//! opens lockers with.
//!
//! Servers run `java … QuorumPeerMain zoo.cfg` directly (not
//! `zkServer.sh`, whose forked JVM would not get the harness's
//! parent-death signal) with `tickTime=500`, so session timeouts of 1 to
//! 10 s are allowed (ZooKeeper clamps them to 2–20 ticks). A server is
//! ready when `srvr` answers with its `Mode:`.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use distlock::conformance::{CaseSettings, LockerFactory, Outage};
use distlock::lock_zookeeper::names::{lock_dir, queue};
use distlock::{async_trait, LockError, Locker};

use crate::harness::probe::{tcp_answer, tcp_request};
use crate::harness::{
    env_override, find_program, free_ports, install_hint, shared_server, Server, ServerSpec,
    ZK_URL_VAR,
};
use crate::outage::ProxyOutage;

/// Debian's ZooKeeper jar; its manifest lists the jars it needs.
pub const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
/// A logging back end that discards ZooKeeper's logs.
pub const SLF4J_NOP_JAR: &str = "/usr/share/java/slf4j-nop.jar";
/// ZooKeeper's tick: session timeouts may range from 2 to 20 ticks.
pub const TICK: Duration = Duration::from_millis(500);

/// The `java` program and the class path, or what to install.
fn java_and_classpath() -> Result<(PathBuf, String), String> {
    let hint = install_hint("zookeeper", ZK_URL_VAR);
    let java = find_program(&["java"], &hint)?;
    for jar in [ZOOKEEPER_JAR, SLF4J_NOP_JAR] {
        if !Path::new(jar).is_file() {
            return Err(format!("{jar} not found: {hint}"));
        }
    }
    Ok((java, format!("{ZOOKEEPER_JAR}:{SLF4J_NOP_JAR}")))
}

/// The settings every test server shares.
fn common_config(data_dir: &Path) -> String {
    format!(
        "tickTime={tick}\ndataDir={data}\nmaxClientCnxns=0\nadmin.enableServer=false\n\
         4lw.commands.whitelist=ruok,srvr,wchp\ninitLimit=10\nsyncLimit=5\n",
        tick = TICK.as_millis(),
        data = data_dir.display(),
    )
}

/// JVM arguments running `QuorumPeerMain` on `config`.
fn jvm_args(classpath: &str, config: &Path) -> Vec<OsString> {
    [
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-cp",
        classpath,
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
    ]
    .into_iter()
    .map(OsString::from)
    .chain([config.as_os_str().to_owned()])
    .collect()
}

/// Writes `text` to `path`; the argument builder cannot fail, so a write
/// error shows up as the server failing to start, with this message.
fn write_or_log(path: &Path, text: &str) {
    if let Err(e) = std::fs::write(path, text) {
        eprintln!("cannot write {}: {e}", path.display());
    }
}

/// A standalone ZooKeeper on the harness's free port.
pub fn standalone_spec() -> Result<ServerSpec, String> {
    let (java, classpath) = java_and_classpath()?;
    Ok(ServerSpec::new("zookeeper", java)
        .args(move |ctx| {
            let config = ctx.data_dir.join("zoo.cfg");
            let text = format!(
                "{}clientPort={}\nclientPortAddress=127.0.0.1\n",
                common_config(&ctx.data_dir),
                ctx.port
            );
            write_or_log(&config, &text);
            jvm_args(&classpath, &config)
        })
        .probe(|ctx| Box::pin(tcp_request(ctx.addr(), b"srvr", "Mode:"))))
}

/// A running ZooKeeper ensemble on loopback.
#[derive(Debug)]
pub struct Ensemble {
    /// The members, in `myid` order (member `i` has id `i + 1`).
    pub members: Vec<Server>,
    client_ports: Vec<u16>,
}

impl Ensemble {
    /// Starts `size` members at once and waits until each serves clients
    /// (a quorum has formed). Ports are reserved up front because every
    /// member's configuration lists all of them.
    pub async fn start(size: usize) -> Result<Self, String> {
        let (java, classpath) = java_and_classpath()?;
        let ports = free_ports(size * 3).map_err(|e| format!("free ports: {e}"))?;
        let (clients, peers) = ports.split_at(size);
        let servers: String = (0..size)
            .map(|i| {
                format!(
                    "server.{}=127.0.0.1:{}:{};127.0.0.1:{}\n",
                    i + 1,
                    peers[2 * i],
                    peers[2 * i + 1],
                    clients[i]
                )
            })
            .collect();
        let starts = (0..size).map(|i| {
            let (java, classpath, servers) = (java.clone(), classpath.clone(), servers.clone());
            let client = SocketAddr::from((Ipv4Addr::LOCALHOST, clients[i]));
            ServerSpec::new(format!("zookeeper-{}", i + 1), java)
                .args(move |ctx| {
                    write_or_log(&ctx.data_dir.join("myid"), &format!("{}\n", i + 1));
                    let config = ctx.data_dir.join("zoo.cfg");
                    write_or_log(
                        &config,
                        &format!("{}{servers}", common_config(&ctx.data_dir)),
                    );
                    jvm_args(&classpath, &config)
                })
                .probe(move |_| Box::pin(tcp_request(client, b"srvr", "Mode:")))
                .start()
        });
        let members = futures_join_all(starts).await?;
        Ok(Self {
            members,
            client_ports: clients.to_vec(),
        })
    }

    /// The client address of member `i`.
    pub fn client_addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.client_ports[i]))
    }

    /// Every member's client address.
    pub fn client_addrs(&self) -> Vec<SocketAddr> {
        (0..self.members.len())
            .map(|i| self.client_addr(i))
            .collect()
    }

    /// Which member answers `srvr` with `Mode: leader`, if any.
    pub async fn leader(&self) -> Option<usize> {
        for i in 0..self.members.len() {
            if tcp_request(self.client_addr(i), b"srvr", "Mode: leader")
                .await
                .is_ok()
            {
                return Some(i);
            }
        }
        None
    }
}

/// Runs the start futures concurrently (JVMs start slowly; in parallel
/// the ensemble forms in one start-up time). Fails with the first error.
async fn futures_join_all<F>(starts: impl Iterator<Item = F>) -> Result<Vec<Server>, String>
where
    F: std::future::Future<Output = Result<Server, String>> + Send + 'static,
{
    let tasks: Vec<_> = starts.map(tokio::spawn).collect();
    let mut servers = Vec::with_capacity(tasks.len());
    let mut first_error = None;
    for task in tasks {
        match task.await {
            Ok(Ok(server)) => servers.push(server),
            Ok(Err(e)) => first_error = first_error.or(Some(e)),
            Err(e) => first_error = first_error.or(Some(e.to_string())),
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(servers),
    }
}

/// A `zk://` URL over `addrs` with base path `base` and query `query`.
pub fn zk_url(addrs: &[SocketAddr], base: &str, query: &str) -> String {
    let hosts: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    format!("zk://{}{base}{query}", hosts.join(","))
}

/// The shared standalone server of this test binary (or the server
/// `DISTLOCK_TEST_ZK_URL` names): its client addresses.
pub async fn shared_standalone() -> Result<Vec<SocketAddr>, String> {
    if let Some(url) = env_override(ZK_URL_VAR) {
        return hosts_of(&url);
    }
    let server = shared_server("zookeeper", standalone_spec).await?;
    Ok(vec![server.addr()])
}

/// The `host:port` list of a `zk://` URL as socket addresses.
fn hosts_of(url: &str) -> Result<Vec<SocketAddr>, String> {
    let parsed = distlock::LockUrl::parse(url).map_err(|e| e.to_string())?;
    parsed
        .hosts
        .iter()
        .map(|h| {
            use std::net::ToSocketAddrs;
            (h.host.as_str(), h.port.unwrap_or(2181))
                .to_socket_addrs()
                .ok()
                .and_then(|mut addrs| addrs.next())
                .ok_or_else(|| format!("{ZK_URL_VAR}: cannot resolve {h}"))
        })
        .collect()
}

/// Opens lockers by URL on a ZooKeeper deployment; takes locks away by
/// deleting the holder's node with a separate client session, and opens
/// lockers behind fault proxies for the outage case.
#[derive(Debug)]
pub struct ZkFactory {
    addrs: Vec<SocketAddr>,
    base: String,
    query: String,
}

impl ZkFactory {
    /// A factory for the servers at `addrs`, locks under `base`, extra
    /// URL options in `query` (e.g. `user=a&password=b`).
    pub fn new(addrs: Vec<SocketAddr>, base: &str, query: &str) -> Self {
        Self {
            addrs,
            base: base.to_owned(),
            query: query.to_owned(),
        }
    }

    /// The lock URL lockers are opened on (before the case's settings).
    pub fn url(&self) -> String {
        zk_url(&self.addrs, &self.base, &self.query)
    }

    /// Opens a locker on `addrs` with the case's ttl and namespace.
    /// (`UrlFactory` cannot be used: the `url` crate rejects host lists.)
    async fn open_on(
        &self,
        addrs: &[SocketAddr],
        settings: &CaseSettings,
    ) -> Result<Locker, LockError> {
        let mut query = format!(
            "ttl={}ms&namespace={}",
            settings.ttl.as_millis(),
            settings.namespace
        );
        if !self.query.is_empty() {
            query = format!("{}&{query}", self.query);
        }
        distlock::connect(&zk_url(addrs, &self.base, &query)).await
    }

    /// A plain ZooKeeper session on the deployment (no chroot, no auth),
    /// for looking at or meddling with lock nodes as an operator would.
    pub async fn raw_client(&self) -> Result<zookeeper_client::Client, LockError> {
        let hosts: Vec<String> = self.addrs.iter().map(ToString::to_string).collect();
        zookeeper_client::Client::connect(&hosts.join(","))
            .await
            .map_err(|e| LockError::backend(format!("connect to {}", hosts.join(",")), e))
    }

    /// The contenders directory of `key` in `locker`'s namespace.
    pub fn lock_dir(&self, locker: &Locker, key: &str) -> Result<String, LockError> {
        Ok(lock_dir(&self.base, &locker.name(key)?))
    }

    /// How many sessions watch node `path`, as the first server's `wchp`
    /// (watches by path) reports it.
    pub async fn watchers_of(&self, path: &str) -> Result<usize, String> {
        let answer = tcp_answer(self.addrs[0], b"wchp").await?;
        // A path on a line of its own, then one indented line per session.
        Ok(answer
            .lines()
            .skip_while(|line| *line != path)
            .skip(1)
            .take_while(|line| line.starts_with(char::is_whitespace))
            .count())
    }

    /// Deletes the node holding `key` in `locker`'s namespace, as an
    /// operator would, from a session of its own.
    pub async fn delete_holder(&self, locker: &Locker, key: &str) -> Result<(), LockError> {
        let dir = self.lock_dir(locker, key)?;
        let fail = |what: &str, e: zookeeper_client::Error| {
            LockError::backend(format!("take_away: {what}"), e)
        };
        let client = self.raw_client().await?;
        let children = client
            .list_children(&dir)
            .await
            .map_err(|e| fail("list", e))?;
        let holder = queue(&children)
            .into_iter()
            .next()
            .ok_or_else(|| LockError::invalid_config(format!("no holder under {dir}")))?;
        client
            .delete(&format!("{dir}/{}", holder.name), None)
            .await
            .map_err(|e| fail("delete", e))
    }
}

#[async_trait]
impl LockerFactory for ZkFactory {
    async fn open(&self, settings: &CaseSettings) -> Result<Locker, LockError> {
        self.open_on(&self.addrs, settings).await
    }

    async fn take_away(&self, locker: &Locker, key: &str) -> Option<Result<(), LockError>> {
        Some(self.delete_holder(locker, key).await)
    }

    async fn open_with_outage(
        &self,
        settings: &CaseSettings,
    ) -> Option<Result<(Locker, Box<dyn Outage>), LockError>> {
        // A non-loopback server (DISTLOCK_TEST_ZK_URL) cannot be cut.
        let outage = ProxyOutage::start(&self.addrs).ok()?;
        let opened = self.open_on(&outage.addrs(), settings).await;
        Some(opened.map(|locker| (locker, Box::new(outage) as Box<dyn Outage>)))
    }
}
