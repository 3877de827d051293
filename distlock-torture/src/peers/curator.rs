//! Apache Curator's `InterProcessMutex` and `LeaderLatch` (the peer
//! program of distlock-testkit, one JVM per contender) beside distlock's
//! `layout=curator`, on one standalone ZooKeeper.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use distlock_testkit::curator::{RecipePeer, Take};
use distlock_testkit::url::host_list;
use distlock_testkit::zookeeper::{start_standalone_with, zk_url, ZkSettings};
use distlock_testkit::Server;

use super::{census, Census, Contender, Family, Primitive};

/// The session timeout of every peer and locker.
const SESSION: Duration = Duration::from_secs(10);

/// One Curator client (a JVM) taking a mutex or a leader latch.
#[derive(Debug)]
pub struct CuratorContender {
    peer: RecipePeer,
    take: Take,
}

#[async_trait]
impl Contender for CuratorContender {
    async fn ask(&mut self) -> Result<(), String> {
        self.peer.begin(&self.take).await
    }

    async fn held(&mut self) -> Result<Instant, String> {
        self.peer.held().await?;
        Ok(Instant::now())
    }

    async fn give_back(&mut self) -> Result<(), String> {
        self.peer.release().await
    }
}

/// A standalone ZooKeeper, Curator peers on it, and distlock with
/// `layout=curator`.
#[derive(Debug)]
pub struct CuratorFamily {
    server: Server,
    raw: zookeeper_client::Client,
}

impl CuratorFamily {
    /// Starts the server (ZooKeeper's own settings but the tick, see
    /// [`ZkSettings::default`]).
    pub async fn start() -> Result<Self, String> {
        let server = start_standalone_with(ZkSettings::default()).await?;
        let raw = distlock_testkit::zookeeper::raw_client(&[server.addr()])
            .await
            .map_err(|e| e.to_string())?;
        Ok(Self { server, raw })
    }

    fn addrs(&self) -> [SocketAddr; 1] {
        [self.server.addr()]
    }
}

#[async_trait]
impl Family for CuratorFamily {
    fn store(&self) -> &'static str {
        "ZooKeeper"
    }

    fn peer(&self) -> &'static str {
        "Curator"
    }

    fn distlock_url(&self) -> String {
        let query = format!("layout=curator&ttl={}s", SESSION.as_secs());
        zk_url(&self.addrs(), "/", &query)
    }

    async fn peer_contender(
        &self,
        key: &str,
        primitive: Primitive,
    ) -> Result<Box<dyn Contender>, String> {
        let peer = RecipePeer::curator(&host_list(self.addrs()), SESSION).await?;
        let path = format!("/{key}");
        let take = match primitive {
            Primitive::Lock => Take::Mutex(path),
            Primitive::Leader => Take::Latch(path, "curator".into()),
        };
        Ok(Box::new(CuratorContender { peer, take }))
    }

    fn census(&self, key: &str) -> Census {
        census(
            (self.raw.clone(), format!("/{key}")),
            |(raw, path)| async move {
                match raw.list_children(&path).await {
                    Ok(children) => Ok(children.len()),
                    Err(zookeeper_client::Error::NoNode) => Ok(0),
                    Err(e) => Err(format!("list {path}: {e}")),
                }
            },
        )
    }
}
