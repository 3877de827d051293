//! [`StoreFactory`]: the one factory the suite opens lockers with, on any
//! store named by URL.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use distlock::conformance::{
    async_trait, case_url, CaseSettings, LockerFactory, Outage, UrlFactory,
};
use distlock::{LockError, Locker};
use distlock_testkit::replace_hosts;

use crate::outage::ProxyOutage;

/// Takes a lock away from its holder from outside distlock, as an
/// operator or a store failure would.
#[async_trait]
pub trait TakeAway: Send + Sync + fmt::Debug {
    /// Takes the lock on `key`, in `locker`'s namespace, away.
    async fn take_away(&self, locker: &Locker, key: &str) -> Result<(), LockError>;
}

/// Opens lockers on the store a base URL names, with each case's ttl and
/// namespace. For the outage case it puts a fault proxy in front of each
/// of the servers it was given and sends the locker through them; a lock
/// is taken away by a [`TakeAway`] hook, or else with `force_release`.
#[derive(Clone, Debug)]
pub struct StoreFactory {
    urls: UrlFactory,
    base: String,
    proxied: Vec<SocketAddr>,
    take_away: Option<Arc<dyn TakeAway>>,
}

impl StoreFactory {
    /// Lockers on `base` (with whatever options it carries); no outage
    /// case; locks taken away with `force_release`.
    ///
    /// # Panics
    ///
    /// If `base` names no store compiled into this build.
    pub fn new(base: impl Into<String>) -> Self {
        let base = base.into();
        Self {
            urls: UrlFactory::new(&base).unwrap_or_else(|e| panic!("{e}")),
            base,
            proxied: Vec::new(),
            take_away: None,
        }
    }

    /// Runs the outage case through proxies in front of `servers`, the
    /// hosts of the base URL in order (none: the case is not applicable).
    pub fn outage_through(mut self, servers: Vec<SocketAddr>) -> Self {
        self.proxied = servers;
        self
    }

    /// Takes locks away with `hook`.
    pub fn take_away_with(mut self, hook: impl TakeAway + 'static) -> Self {
        self.take_away = Some(Arc::new(hook));
        self
    }

    /// The URL lockers are opened on, before the case's settings.
    pub fn base(&self) -> &str {
        &self.base
    }
}

#[async_trait]
impl LockerFactory for StoreFactory {
    async fn open(&self, settings: &CaseSettings) -> Result<Locker, LockError> {
        self.urls.open(settings).await
    }

    async fn take_away(&self, locker: &Locker, key: &str) -> Option<Result<(), LockError>> {
        match &self.take_away {
            Some(hook) => Some(hook.take_away(locker, key).await),
            None => self.urls.take_away(locker, key).await,
        }
    }

    async fn open_with_outage(
        &self,
        settings: &CaseSettings,
    ) -> Option<Result<(Locker, Box<dyn Outage>), LockError>> {
        if self.proxied.is_empty() {
            return None;
        }
        let outage = match ProxyOutage::start(&self.proxied) {
            Ok(outage) => outage,
            Err(e) => return Some(Err(e)),
        };
        let url = case_url(&replace_hosts(&self.base, &outage.addrs()), settings);
        let outage: Box<dyn Outage> = Box::new(outage);
        Some(distlock::connect(&url).await.map(|locker| (locker, outage)))
    }
}

/// Deletes the etcd queue entry of a lock's holder with a raw client.
#[derive(Debug)]
pub struct DeleteEtcdHolder {
    /// An `etcd://` URL of the cluster.
    pub url: String,
}

#[async_trait]
impl TakeAway for DeleteEtcdHolder {
    async fn take_away(&self, locker: &Locker, key: &str) -> Result<(), LockError> {
        let fail = |what: &str, e| LockError::backend(format!("take_away: {what}"), e);
        let name = locker.name(key)?;
        let client = distlock_testkit::etcd::raw_client(&self.url)
            .await
            .map_err(|e| fail("connect a raw client", e))?;
        let Some((entry, _lease)) = distlock_testkit::etcd::holder_entry(&client, &name)
            .await
            .map_err(|e| fail("read the queue", e))?
        else {
            return Err(LockError::invalid_config(format!("no holder of `{key}`")));
        };
        client
            .kv_client()
            .delete(entry, None)
            .await
            .map_err(|e| fail("delete the holder's entry", e))?;
        Ok(())
    }
}

/// Deletes the ZooKeeper node of a lock's holder from a session of its
/// own.
#[derive(Debug)]
pub struct DeleteZkHolder {
    /// The servers.
    pub addrs: Vec<SocketAddr>,
    /// The base path of the URL lockers are opened on.
    pub base: String,
}

#[async_trait]
impl TakeAway for DeleteZkHolder {
    async fn take_away(&self, locker: &Locker, key: &str) -> Result<(), LockError> {
        let name = locker.name(key)?;
        let client = distlock_testkit::zookeeper::raw_client(&self.addrs)
            .await
            .map_err(|e| LockError::backend("take_away: connect a raw session", e))?;
        distlock_testkit::zookeeper::delete_holder(&client, &self.base, &name)
            .await
            .map_err(|e| LockError::backend("take_away", e))
    }
}
