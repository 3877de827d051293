//! [`ZkCuratorFactory`]: the suite on ZooKeeper's `layout=curator`, each
//! case's lockers under a base path of their own.
//!
//! In that layout a key is a path shared by every namespace (as Curator
//! names it), so the namespace cannot keep the cases apart: each case's
//! lockers get the URL path `<root>/<namespace>` instead, the way two
//! Curator applications use two namespaces (chroots).

use std::net::SocketAddr;

use distlock::conformance::{async_trait, case_url, CaseSettings, LockerFactory, Outage};
use distlock::{LockError, LockName, Locker};
use distlock_testkit::layout::zk_lock_dir;
use distlock_testkit::zookeeper::{raw_client, zk_url};

use crate::outage::ProxyOutage;

/// The markers Curator's lock recipes put before a node's sequence
/// number.
const MARKERS: [&str; 5] = ["lock-", "latch-", "__READ__", "__WRIT__", "lease-"];

/// Opens lockers with `layout=curator` on the servers at `addrs`, each
/// case under `<root>/<its namespace>`; takes a lock away by deleting its
/// holder's node from a session of its own.
#[derive(Clone, Debug)]
pub struct ZkCuratorFactory {
    addrs: Vec<SocketAddr>,
    root: String,
    proxied: bool,
}

impl ZkCuratorFactory {
    /// Lockers on the servers at `addrs`, each case under
    /// `<root>/<namespace>` (`root` absolute, without a trailing `/`).
    /// The outage case runs through proxies in front of the servers if
    /// `proxied` (they must be on loopback).
    pub fn new(addrs: Vec<SocketAddr>, root: &str, proxied: bool) -> Self {
        Self {
            addrs,
            root: root.to_owned(),
            proxied,
        }
    }

    /// The URL of a case's lockers on `addrs`.
    fn url(&self, addrs: &[SocketAddr], settings: &CaseSettings) -> String {
        let base = format!("{}/{}", self.root, settings.namespace.as_str());
        case_url(&zk_url(addrs, &base, "layout=curator"), settings)
    }

    /// The znode where lock `name` lives for a locker of this factory:
    /// `<root>/<namespace>/<key>`, its levels encoded as the store does.
    pub fn lock_path(&self, name: &LockName) -> String {
        let dir = zk_lock_dir(&self.root, name);
        dir.strip_suffix("/_locks").unwrap_or(&dir).to_owned()
    }
}

/// The Curator recipe nodes among `children`, first in line first: by the
/// sequence number after the last marker in each name.
pub fn curator_queue(children: &[String]) -> Vec<&str> {
    let mut nodes: Vec<(u64, &str)> = children
        .iter()
        .filter_map(|child| {
            let at = MARKERS
                .iter()
                .filter_map(|marker| Some(child.rfind(marker)? + marker.len()))
                .max()?;
            let digits = &child[at..];
            let all_digits = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
            Some((digits.parse().ok().filter(|_| all_digits)?, child.as_str()))
        })
        .collect();
    nodes.sort();
    nodes.into_iter().map(|(_, name)| name).collect()
}

#[async_trait]
impl LockerFactory for ZkCuratorFactory {
    async fn open(&self, settings: &CaseSettings) -> Result<Locker, LockError> {
        distlock::connect(&self.url(&self.addrs, settings)).await
    }

    /// Deletes the first node in line at the lock's path.
    async fn take_away(&self, locker: &Locker, key: &str) -> Option<Result<(), LockError>> {
        let fail = |what: String| LockError::invalid_config(format!("take_away: {what}"));
        let taken = async {
            let path = self.lock_path(&locker.name(key)?);
            let client = raw_client(&self.addrs)
                .await
                .map_err(|e| fail(format!("connect a raw session: {e}")))?;
            let children = client
                .list_children(&path)
                .await
                .map_err(|e| fail(format!("list {path}: {e}")))?;
            let holder = curator_queue(&children)
                .first()
                .map(|name| format!("{path}/{name}"))
                .ok_or_else(|| fail(format!("no holder under {path}")))?;
            client
                .delete(&holder, None)
                .await
                .map_err(|e| fail(format!("delete {holder}: {e}")))
        };
        Some(taken.await)
    }

    async fn open_with_outage(
        &self,
        settings: &CaseSettings,
    ) -> Option<Result<(Locker, Box<dyn Outage>), LockError>> {
        if !self.proxied {
            return None;
        }
        let outage = match ProxyOutage::start(&self.addrs) {
            Ok(outage) => outage,
            Err(e) => return Some(Err(e)),
        };
        let url = self.url(&outage.addrs(), settings);
        let outage: Box<dyn Outage> = Box::new(outage);
        Some(distlock::connect(&url).await.map(|locker| (locker, outage)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curator_nodes_are_ordered_by_their_sequence() {
        let children: Vec<String> = [
            "_c_b-__WRIT__0000000007",
            "nested",
            "_c_a-__READ__0000000003",
            "_c_c-lock-12x",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            curator_queue(&children),
            ["_c_a-__READ__0000000003", "_c_b-__WRIT__0000000007"]
        );
    }
}
