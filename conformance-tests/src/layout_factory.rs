//! [`EtcdConcurrencyFactory`]: the suite on etcd's `layout=concurrency`,
//! where the locker's namespace is not part of the keys, so each case's
//! lockers get a `key_prefix` of their own instead.

use std::net::SocketAddr;

use distlock::conformance::{async_trait, case_url, CaseSettings, LockerFactory, Outage};
use distlock::{LockError, Locker};
use distlock_testkit::{replace_hosts, with_query};

use crate::outage::ProxyOutage;

/// Opens lockers on an etcd URL with `layout=concurrency` and
/// `key_prefix=<case namespace>/`, so cases running side by side on one
/// server never share a lock. A lock is taken away by deleting the
/// first-created key under its prefix with a raw client; the outage case
/// goes through proxies in front of the members given.
#[derive(Clone, Debug)]
pub struct EtcdConcurrencyFactory {
    /// The `etcd://` URL, with whatever options it carries.
    base: String,
    members: Vec<SocketAddr>,
}

impl EtcdConcurrencyFactory {
    /// Lockers on `base` (an `etcd://` URL without `layout`), cut off for
    /// the outage case through proxies in front of `members` (none: the
    /// case is not applicable).
    pub fn new(base: impl Into<String>, members: Vec<SocketAddr>) -> Self {
        Self {
            base: base.into(),
            members,
        }
    }

    /// The URL of a case's locker on `base`.
    fn url(base: &str, settings: &CaseSettings) -> String {
        let query = format!(
            "layout=concurrency&key_prefix={}/",
            settings.namespace.as_str()
        );
        with_query(&case_url(base, settings), &query)
    }

    /// The prefix of lock `key` of a locker opened by this factory.
    fn lock_prefix(locker: &Locker, key: &str) -> String {
        format!("{}/{key}/", locker.namespace().as_str())
    }
}

#[async_trait]
impl LockerFactory for EtcdConcurrencyFactory {
    async fn open(&self, settings: &CaseSettings) -> Result<Locker, LockError> {
        distlock::connect(&Self::url(&self.base, settings)).await
    }

    async fn take_away(&self, locker: &Locker, key: &str) -> Option<Result<(), LockError>> {
        let fail = |what: &str, e| LockError::backend(format!("take_away: {what}"), e);
        let taken = async {
            let client = distlock_testkit::etcd::raw_client(&self.base)
                .await
                .map_err(|e| fail("connect a raw client", e))?;
            let prefix = Self::lock_prefix(locker, key);
            match distlock_testkit::etcdctl::delete_first_created(&client, &prefix).await {
                Ok(true) => Ok(()),
                Ok(false) => Err(LockError::invalid_config(format!("no holder of `{key}`"))),
                Err(e) => Err(fail("delete the holder's key", e)),
            }
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
        let url = Self::url(&replace_hosts(&self.base, &outage.addrs()), settings);
        let outage: Box<dyn Outage> = Box::new(outage);
        Some(distlock::connect(&url).await.map(|locker| (locker, outage)))
    }
}
