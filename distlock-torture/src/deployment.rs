//! The stores and topologies a run starts, on free loopback ports.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use distlock_testkit::pg_standby::{Replication, StreamingPair};
use distlock_testkit::pgbouncer::PgBouncer;
use distlock_testkit::postgres::{PgServer, DATABASE, SUPERUSER};
use distlock_testkit::redis_sentinel::{SentinelGroup, MASTER_NAME};
use distlock_testkit::zookeeper::Ensemble;
use distlock_testkit::{
    etcd, probe, redis, url::host_list, with_query, zookeeper, Restartable, Server,
};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde::Serialize;

/// A store and the shape of its deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Topology {
    /// Local files (`file://`): clients on one machine, no server.
    File,
    /// One Redis server without persistence.
    RedisSingle,
    /// One Redis server with AOF and `appendfsync always`.
    RedisAof,
    /// Redis Cluster: 3 masters with one replica each.
    RedisCluster,
    /// Redis Sentinel: a master, its replica and three sentinels.
    RedisSentinel,
    /// Redlock over 5 independent Redis masters.
    Redlock,
    /// One etcd member (fsync on).
    EtcdSingle,
    /// Three etcd members.
    EtcdCluster,
    /// One ZooKeeper server.
    ZkStandalone,
    /// A ZooKeeper ensemble of three servers.
    ZkEnsemble,
    /// One PostgreSQL server (default settings: fsync and synchronous
    /// commit on).
    PgSingle,
    /// One PostgreSQL server behind PgBouncer in transaction pooling
    /// mode; notifications on a direct connection (`listen_url`).
    PgBouncer,
    /// A PostgreSQL primary with a synchronous streaming standby; its
    /// member kill is a failover (the primary killed, the standby
    /// promoted), once per run.
    PgSyncStandby,
}

impl Topology {
    /// Every topology, in the order runs go through them.
    pub const ALL: [Topology; 13] = [
        Topology::File,
        Topology::RedisSingle,
        Topology::RedisAof,
        Topology::RedisCluster,
        Topology::RedisSentinel,
        Topology::Redlock,
        Topology::EtcdSingle,
        Topology::EtcdCluster,
        Topology::ZkStandalone,
        Topology::ZkEnsemble,
        Topology::PgSingle,
        Topology::PgBouncer,
        Topology::PgSyncStandby,
    ];

    /// The store's name, as in the URL scheme.
    pub fn store(self) -> &'static str {
        match self {
            Topology::File => "file",
            Topology::RedisSingle | Topology::RedisAof => "redis",
            Topology::RedisCluster => "redis+cluster",
            Topology::RedisSentinel => "redis+sentinel",
            Topology::Redlock => "redlock",
            Topology::EtcdSingle | Topology::EtcdCluster => "etcd",
            Topology::ZkStandalone | Topology::ZkEnsemble => "zk",
            Topology::PgSingle | Topology::PgBouncer | Topology::PgSyncStandby => "postgres",
        }
    }

    /// The deployment's name.
    pub fn name(self) -> &'static str {
        match self {
            Topology::File => "local files",
            Topology::RedisSingle => "1 server, no persistence",
            Topology::RedisAof => "1 server, appendfsync always",
            Topology::RedisCluster => "3 masters + 3 replicas",
            Topology::RedisSentinel => "master + replica + 3 sentinels",
            Topology::Redlock => "5 masters, no persistence",
            Topology::EtcdSingle => "1 member",
            Topology::EtcdCluster => "3 members",
            Topology::ZkStandalone => "standalone",
            Topology::ZkEnsemble => "3 servers",
            Topology::PgSingle => "1 server",
            Topology::PgBouncer => "1 server behind PgBouncer",
            Topology::PgSyncStandby => "primary + synchronous standby",
        }
    }

    /// Whether clients reach it through fault proxies (partitions and
    /// latency can be injected). A cluster's clients follow the addresses
    /// its nodes announce, and a sentinel's clients the master's address
    /// the sentinels announce, so they cannot be put behind a proxy.
    pub fn proxied(self) -> bool {
        !matches!(
            self,
            Topology::File | Topology::RedisCluster | Topology::RedisSentinel
        )
    }

    /// Whether it has servers to kill or pause. A primary with a
    /// standby is failed over instead (a primary restarted after its
    /// standby was promoted would be a second primary).
    pub fn has_servers(self) -> bool {
        !matches!(self, Topology::File | Topology::PgSyncStandby)
    }

    /// Whether losing one server is survivable by design (a member of a
    /// replicated deployment).
    pub fn replicated(self) -> bool {
        matches!(
            self,
            Topology::RedisCluster
                | Topology::RedisSentinel
                | Topology::EtcdCluster
                | Topology::ZkEnsemble
                | Topology::PgSyncStandby
        )
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.store(), self.name())
    }
}

/// A running deployment.
#[derive(Debug)]
pub struct Deployment {
    /// What it is.
    pub topology: Topology,
    /// Its servers (empty for files; for Sentinel the master, the
    /// replica, then the three sentinels; for PgBouncer the bouncer, then
    /// the server).
    pub servers: Vec<Box<dyn Restartable>>,
    /// Where clients connect, one address per server.
    pub client_addrs: Vec<SocketAddr>,
    dir: Option<tempfile::TempDir>,
    /// PostgreSQL's superuser password and, behind PgBouncer, the
    /// server's own URL for the LISTEN connection.
    postgres: Option<PgAccess>,
    /// The primary and standby of [`Topology::PgSyncStandby`], until its
    /// failover.
    pair: tokio::sync::Mutex<Option<StreamingPair>>,
    /// The promoted standby, after the failover.
    promoted: std::sync::Mutex<Option<PgServer>>,
}

/// How clients log in to a PostgreSQL deployment.
#[derive(Debug)]
struct PgAccess {
    password: String,
    listen_url: Option<String>,
}

impl Deployment {
    /// Starts `topology` and waits until it serves clients.
    pub async fn start(topology: Topology) -> Result<Self, String> {
        let mut dir = None;
        // An ensemble member's client port is not its first port.
        let mut ensemble_addrs = Vec::new();
        let servers = match topology {
            Topology::File => {
                dir = Some(tempfile::tempdir().map_err(|e| format!("lock directory: {e}"))?);
                Vec::new()
            }
            Topology::RedisSingle => vec![redis::redis_spec("torture-redis")?.start().await?],
            Topology::RedisAof => vec![redis::redis_aof_spec("torture-redis-aof")?.start().await?],
            Topology::RedisCluster => redis::start_cluster_with_replicas(3, 1).await?,
            Topology::RedisSentinel => {
                let group = SentinelGroup::start("torture-sentinel").await?;
                let mut servers = vec![group.master, group.replica];
                servers.extend(group.sentinels);
                servers
            }
            Topology::Redlock => redis::start_masters("torture-redlock", 5).await?,
            Topology::EtcdSingle => vec![etcd::etcd_spec("torture-etcd", true)?.start().await?],
            Topology::EtcdCluster => etcd::start_cluster("torture-etcd", true).await?,
            Topology::ZkStandalone => vec![zookeeper::standalone_spec()?.start().await?],
            Topology::ZkEnsemble => {
                let ensemble = Ensemble::start(3).await?;
                ensemble_addrs = ensemble.client_addrs();
                ensemble.members
            }
            Topology::PgSingle | Topology::PgBouncer | Topology::PgSyncStandby => {
                return Self::start_postgres(topology).await;
            }
        };
        let client_addrs = if ensemble_addrs.is_empty() {
            servers.iter().map(Server::addr).collect()
        } else {
            ensemble_addrs
        };
        Ok(Self {
            topology,
            servers: servers.into_iter().map(boxed).collect(),
            client_addrs,
            dir,
            postgres: None,
            pair: Default::default(),
            promoted: Default::default(),
        })
    }

    /// Starts a PostgreSQL topology: the server, and PgBouncer in front.
    async fn start_postgres(topology: Topology) -> Result<Self, String> {
        if topology == Topology::PgSyncStandby {
            return Self::start_pair().await;
        }
        let server = PgServer::start("torture-postgres").await?;
        let password = server.password().to_owned();
        let (servers, listen_url): (Vec<Box<dyn Restartable>>, _) = match topology {
            Topology::PgBouncer => {
                let bouncer = PgBouncer::start(&server).await?;
                let listen = utf8_percent_encode(&server.url(), NON_ALPHANUMERIC).to_string();
                let bouncer = boxed(bouncer.into_server());
                (vec![bouncer, Box::new(server)], Some(listen))
            }
            _ => (vec![Box::new(server)], None),
        };
        // Clients connect to the first: the bouncer, or the server.
        let client_addrs = vec![servers[0].addr()];
        Ok(Self {
            topology,
            servers,
            client_addrs,
            dir: None,
            postgres: Some(PgAccess {
                password,
                listen_url,
            }),
            pair: Default::default(),
            promoted: Default::default(),
        })
    }

    /// Starts a primary with a synchronous standby; clients list both
    /// and use whichever accepts writes.
    async fn start_pair() -> Result<Self, String> {
        let pair = StreamingPair::start(Replication::Synchronous).await?;
        let client_addrs = vec![pair.primary.server().addr(), pair.standby.server().addr()];
        let password = pair.primary.password().to_owned();
        Ok(Self {
            topology: Topology::PgSyncStandby,
            servers: Vec::new(),
            client_addrs,
            dir: None,
            postgres: Some(PgAccess {
                password,
                listen_url: None,
            }),
            pair: tokio::sync::Mutex::new(Some(pair)),
            promoted: Default::default(),
        })
    }

    /// Fails a primary with a standby over: kills the primary and
    /// promotes the standby. False when there is nothing (left) to fail
    /// over to.
    pub async fn fail_over(&self) -> Result<bool, String> {
        let mut pair = self.pair.lock().await;
        let Some(current) = pair.take() else {
            return Ok(false);
        };
        current.primary.kill().await?;
        current.promote().await?;
        let StreamingPair { standby, .. } = current;
        *self
            .promoted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(standby);
        Ok(true)
    }

    /// The URL of this deployment for a client that connects to `addrs`
    /// (the servers' own addresses, or proxies in front of them, in the
    /// same order), with locks in `namespace` leased for `ttl`.
    pub fn url(&self, addrs: &[SocketAddr], namespace: &str, ttl: Duration) -> String {
        let hosts = host_list(addrs.iter().copied());
        let base = match self.topology {
            Topology::File => {
                let dir = self.dir.as_ref().map(|d| d.path().display().to_string());
                format!("file://{}", dir.unwrap_or_default())
            }
            Topology::RedisSingle | Topology::RedisAof => {
                with_query(&format!("redis://{hosts}"), redis::TEST_TIMEOUTS)
            }
            Topology::RedisCluster => {
                with_query(&format!("redis+cluster://{hosts}"), redis::TEST_TIMEOUTS)
            }
            Topology::RedisSentinel => {
                let sentinels = host_list(addrs.iter().skip(2).copied());
                let url = format!("redis+sentinel://{sentinels}/{MASTER_NAME}");
                with_query(&url, redis::TEST_TIMEOUTS)
            }
            Topology::Redlock => with_query(&format!("redlock://{hosts}"), redis::TEST_TIMEOUTS),
            Topology::EtcdSingle | Topology::EtcdCluster => {
                with_query(&format!("etcd://{hosts}"), etcd::TEST_TIMEOUTS)
            }
            Topology::ZkStandalone | Topology::ZkEnsemble => format!("zk://{hosts}/torture"),
            Topology::PgSingle | Topology::PgBouncer | Topology::PgSyncStandby => {
                self.postgres_url(&hosts)
            }
        };
        let ttl = humantime::format_duration(ttl);
        with_query(&base, &format!("namespace={namespace}&ttl={ttl}"))
    }

    /// A `postgres://` URL on `hosts` as the superuser, with the LISTEN
    /// connection's URL behind PgBouncer.
    fn postgres_url(&self, hosts: &str) -> String {
        let Some(access) = &self.postgres else {
            return String::new();
        };
        let url = format!(
            "postgres://{SUPERUSER}:{}@{hosts}/{DATABASE}?response_timeout=2s",
            access.password
        );
        match &access.listen_url {
            Some(listen) => with_query(&url, &format!("listen_url={listen}")),
            None => url,
        }
    }

    /// The server currently leading: the etcd leader, the ZooKeeper
    /// leader, a Redis Cluster master, the master the sentinels watch;
    /// `None` when none answers as such.
    pub async fn leader(&self) -> Option<usize> {
        let (request, expect): (&[u8], &str) = match self.topology {
            Topology::EtcdCluster => (b"GET /metrics HTTP/1.0\r\n\r\n", "etcd_server_is_leader 1"),
            Topology::ZkEnsemble => (b"srvr", "Mode: leader"),
            Topology::RedisCluster | Topology::RedisSentinel => (b"ROLE\r\n", "master"),
            _ => return None,
        };
        let mut found = Vec::new();
        for (i, addr) in self.client_addrs.iter().enumerate() {
            let asked = probe::tcp_request(*addr, request, expect);
            if let Ok(Ok(())) = tokio::time::timeout(Duration::from_millis(500), asked).await {
                found.push(i);
            }
        }
        // Several Redis masters: any of them leads its slots.
        (!found.is_empty()).then(|| found[fastrand::usize(..found.len())])
    }
}

/// A plain server as the deployment keeps it.
fn boxed(server: Server) -> Box<dyn Restartable> {
    Box::new(server)
}
