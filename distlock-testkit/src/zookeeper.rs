//! ZooKeeper servers for tests: standalone servers and ensembles of
//! Debian's ZooKeeper 3.8, with their URLs.
//!
//! Servers run `java … QuorumPeerMain zoo.cfg` directly (not
//! `zkServer.sh`, whose forked JVM would not get the parent-death signal).
//! They keep ZooKeeper's default limits — 60 connections per client
//! address (`maxClientCnxns`), 1 MB per request (`jute.maxbuffer`), the
//! heap `zkEnv.sh` gives a server — so a test sees what a user's server
//! does; [`ZkSettings`] lists the one thing tests change by default (the
//! tick) and why. A server is ready when `srvr` answers with its `Mode:`.
//! The standalone server can also come from `DISTLOCK_TEST_ZK_URL` instead
//! of being spawned. With the `zookeeper` feature, `raw_client` and
//! `delete_holder` act on locks from outside distlock.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::probe::{tcp_answer, tcp_request};
use crate::{
    env_override, find_program, free_ports, install_hint, shared_server, Server, ServerSpec,
    ZK_URL_VAR,
};

/// Debian's ZooKeeper jar; its manifest lists the jars it needs.
pub const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
/// A logging back end that discards ZooKeeper's logs.
pub const SLF4J_NOP_JAR: &str = "/usr/share/java/slf4j-nop.jar";
/// The tick of test servers: session timeouts may range from 2 to 20
/// ticks, so 1 to 10 s.
pub const TICK: Duration = Duration::from_millis(500);
/// The tick of ZooKeeper's sample configuration (`zoo_sample.cfg`, and
/// Debian's `/etc/zookeeper/conf/zoo.cfg`): session timeouts of 4 to 40 s.
pub const STOCK_TICK: Duration = Duration::from_millis(2000);
/// ZooKeeper's client port when a URL names none.
pub const DEFAULT_PORT: u16 = 2181;
/// The most connections a ZooKeeper server accepts from one client
/// address by default (`maxClientCnxns`); test servers keep it.
pub const DEFAULT_MAX_CLIENT_CONNECTIONS: usize = 60;

/// How a test ZooKeeper's configuration differs from ZooKeeper's own
/// defaults. Every limit not named here (connections per client address,
/// request size, heap, session timeout range in ticks) is ZooKeeper's
/// default.
#[derive(Clone, Debug)]
pub struct ZkSettings {
    tick: Duration,
    properties: Vec<(String, String)>,
}

impl Default for ZkSettings {
    /// What most tests run: [`TICK`] (500 ms) instead of the sample
    /// configuration's 2 s, because the server clamps session timeouts to
    /// 2–20 ticks and the tests use session timeouts of 1 to 10 s (the
    /// conformance suite's shortest ttl is 1 s).
    fn default() -> Self {
        Self {
            tick: TICK,
            properties: Vec::new(),
        }
    }
}

impl ZkSettings {
    /// A server as ZooKeeper's sample configuration sets it up
    /// ([`STOCK_TICK`]), for tests that check what a user's server does.
    pub fn stock() -> Self {
        Self {
            tick: STOCK_TICK,
            properties: Vec::new(),
        }
    }

    /// Sets the server JVM's system property `name` to `value`: ZooKeeper
    /// reads some settings only from there (for example
    /// `znode.container.checkIntervalMs`). A test that changes one says
    /// why where it does.
    pub fn property(mut self, name: &str, value: impl ToString) -> Self {
        self.properties.push((name.to_owned(), value.to_string()));
        self
    }

    /// The server's tick (`tickTime`).
    pub fn tick(&self) -> Duration {
        self.tick
    }
}

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

/// The settings every test server shares. None is a limit: the admin
/// server (Jetty on port 8080) is off because several servers run on one
/// host; the four-letter words are those the probes (`srvr`) and the
/// tests (`wchp`, `ruok`) send; `initLimit`/`syncLimit` are the sample
/// configuration's.
fn common_config(data_dir: &Path, settings: &ZkSettings) -> String {
    format!(
        "tickTime={tick}\ndataDir={data}\nadmin.enableServer=false\n\
         4lw.commands.whitelist=ruok,srvr,wchp\ninitLimit=10\nsyncLimit=5\n",
        tick = settings.tick.as_millis(),
        data = data_dir.display(),
    )
}

/// JVM arguments running `QuorumPeerMain` on `config`, with the system
/// properties of `settings`.
fn jvm_args(classpath: &str, config: &Path, settings: &ZkSettings) -> Vec<OsString> {
    // The heap ZooKeeper's own start script gives a server (zkEnv.sh's
    // ZK_SERVER_HEAP); the serial collector keeps a JVM to one GC thread
    // on a machine shared with builds (not a limit).
    let jvm = ["-Xmx1000m", "-XX:+UseSerialGC"].map(OsString::from);
    let properties = settings
        .properties
        .iter()
        .map(|(name, value)| OsString::from(format!("-D{name}={value}")));
    let main = [
        "-cp",
        classpath,
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
    ]
    .map(OsString::from);
    jvm.into_iter()
        .chain(properties)
        .chain(main)
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

/// A standalone ZooKeeper on a free port, with [`ZkSettings::default`].
pub fn standalone_spec() -> Result<ServerSpec, String> {
    standalone_spec_with(ZkSettings::default())
}

/// Starts a standalone server of its own with `settings` (see
/// [`standalone_spec_with`]).
pub async fn start_standalone_with(settings: ZkSettings) -> Result<Server, String> {
    standalone_spec_with(settings)?.start().await
}

/// A standalone ZooKeeper on a free port, configured by `settings`.
pub fn standalone_spec_with(settings: ZkSettings) -> Result<ServerSpec, String> {
    let (java, classpath) = java_and_classpath()?;
    Ok(ServerSpec::new("zookeeper", java)
        .args(move |ctx| {
            let config = ctx.data_dir.join("zoo.cfg");
            let text = format!(
                "{}clientPort={}\nclientPortAddress=127.0.0.1\n",
                common_config(&ctx.data_dir, &settings),
                ctx.port
            );
            write_or_log(&config, &text);
            jvm_args(&classpath, &config, &settings)
        })
        .probe(|ctx| Box::pin(tcp_request(ctx.addr(), b"srvr", "Mode:"))))
}

/// Jars a TLS server needs beyond those `zookeeper.jar`'s manifest lists
/// (Netty's SSL handler builds on its codec and resolver).
const NETTY_EXTRA_JARS: [&str; 2] = [
    "/usr/share/java/netty-codec.jar",
    "/usr/share/java/netty-resolver.jar",
];

/// A standalone ZooKeeper that also serves TLS on its extra port (the
/// server's `ports()[1]`, Netty's secure client port), with `cert` and
/// `key` (PEM) as its identity, and client certificates signed by `ca`
/// required. Its plain port stays open for the readiness probe.
pub fn tls_standalone_spec(ca: PathBuf, cert: PathBuf, key: PathBuf) -> Result<ServerSpec, String> {
    let (java, classpath) = java_and_classpath()?;
    let settings = ZkSettings::default();
    let classpath = NETTY_EXTRA_JARS
        .iter()
        .filter(|jar| Path::new(jar).is_file())
        .fold(classpath, |path, jar| format!("{path}:{jar}"));
    Ok(ServerSpec::new("zookeeper-tls", java)
        .extra_ports(1)
        .args(move |ctx| {
            // ZooKeeper reads a PEM key store as one file: key, then chain.
            let identity = ctx.data_dir.join("identity.pem");
            let pem = [&key, &cert]
                .iter()
                .map(|file| std::fs::read_to_string(file).unwrap_or_default())
                .collect::<String>();
            write_or_log(&identity, &pem);
            let config = ctx.data_dir.join("zoo.cfg");
            let text = format!(
                "{}clientPort={}\nclientPortAddress=127.0.0.1\nsecureClientPort={}\n\
                 secureClientPortAddress=127.0.0.1\n\
                 serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                 ssl.keyStore.location={}\nssl.keyStore.type=PEM\n\
                 ssl.trustStore.location={}\nssl.trustStore.type=PEM\nssl.clientAuth=need\n",
                common_config(&ctx.data_dir, &settings),
                ctx.port,
                ctx.ports[1],
                identity.display(),
                ca.display(),
            );
            write_or_log(&config, &text);
            jvm_args(&classpath, &config, &settings)
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
                    let settings = ZkSettings::default();
                    write_or_log(
                        &config,
                        &format!("{}{servers}", common_config(&ctx.data_dir, &settings)),
                    );
                    jvm_args(&classpath, &config, &settings)
                })
                .probe(move |_| Box::pin(tcp_request(client, b"srvr", "Mode:")))
                .start()
        });
        let members = start_together(starts).await?;
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
async fn start_together<F>(starts: impl Iterator<Item = F>) -> Result<Vec<Server>, String>
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
    let hosts = crate::url::host_list(addrs.iter().copied());
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    format!("zk://{hosts}{base}{query}")
}

/// The shared standalone server of this test binary (or the server
/// `DISTLOCK_TEST_ZK_URL` names): its client addresses.
pub async fn shared_standalone() -> Result<Vec<SocketAddr>, String> {
    if let Some(url) = env_override(ZK_URL_VAR) {
        return crate::url::resolve_hosts(&url, DEFAULT_PORT)
            .map_err(|e| format!("{ZK_URL_VAR}: {e}"));
    }
    let server = shared_server("zookeeper", standalone_spec).await?;
    Ok(vec![server.addr()])
}

/// How many sessions watch node `path`, as the server at `addr` reports
/// it with the `wchp` (watches by path) four-letter word.
pub async fn watchers_of(addr: SocketAddr, path: &str) -> Result<usize, String> {
    let answer = tcp_answer(addr, b"wchp").await?;
    // A path on a line of its own, then one indented line per session.
    Ok(answer
        .lines()
        .skip_while(|line| *line != path)
        .skip(1)
        .take_while(|line| line.starts_with(char::is_whitespace))
        .count())
}

/// A plain ZooKeeper session on the servers at `addrs` (no chroot, no
/// auth), for looking at or meddling with lock nodes as an operator would.
#[cfg(feature = "zookeeper")]
pub async fn raw_client(
    addrs: &[SocketAddr],
) -> Result<zookeeper_client::Client, zookeeper_client::Error> {
    zookeeper_client::Client::connect(&crate::url::host_list(addrs.iter().copied())).await
}

/// Deletes the node holding lock `name` under base path `base`, as an
/// operator would: the first of the
/// [contenders](crate::layout::zk_contenders) in its
/// [lock directory](crate::layout::zk_lock_dir). Fails if there is none.
#[cfg(feature = "zookeeper")]
pub async fn delete_holder(
    client: &zookeeper_client::Client,
    base: &str,
    name: &lock_core::LockName,
) -> Result<(), String> {
    let dir = crate::layout::zk_lock_dir(base, name);
    let children = client
        .list_children(&dir)
        .await
        .map_err(|e| format!("list {dir}: {e}"))?;
    let holder = crate::layout::zk_contenders(&children)
        .into_iter()
        .next()
        .ok_or_else(|| format!("no holder under {dir}"))?;
    client
        .delete(&format!("{dir}/{holder}"), None)
        .await
        .map_err(|e| format!("delete {dir}/{holder}: {e}"))
}

/// A number the server at `addr` reports in its `srvr` answer: `field` is
/// the label before the colon, such as `"Connections"` (open client
/// connections, this request's own included) or `"Node count"` (znodes in
/// the whole tree, the four system nodes included).
pub async fn srvr_number(addr: SocketAddr, field: &str) -> Result<u64, String> {
    let answer = tcp_answer(addr, b"srvr").await?;
    let label = format!("{field}:");
    answer
        .lines()
        .find_map(|line| line.strip_prefix(&label))
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| format!("no number for {field:?} in the srvr answer: {answer}"))
}
