//! What the tests of this crate share.

#![allow(dead_code)] // not every test binary uses everything

pub(crate) mod helper;
pub(crate) mod mixed;
pub(crate) mod referee;

use std::net::SocketAddr;
use std::time::Duration;

use distlock_testkit::shared_server;
use distlock_testkit::zookeeper::standalone_spec;
use lock_core::open::open_store;
use lock_core::{LockError, LockGuard, LockInfo, Locker};
use lock_zookeeper::ZkStore;
use tokio::task::JoinHandle;

/// Generous bound for what should be quick, on a busy 2-core machine.
pub(crate) const SLACK: Duration = Duration::from_secs(5);

/// Opens a locker on the ZooKeeper deployment `url` names, without the
/// `distlock` facade.
pub(crate) async fn connect(url: &str) -> Result<Locker, LockError> {
    open_store::<ZkStore>(url).await
}

/// The standalone server the tests of this binary share, always one
/// started here (never one named by the environment), for tests that cut
/// its network or must know where it runs.
pub(crate) async fn local_standalone() -> SocketAddr {
    shared_server("zookeeper", standalone_spec)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .addr()
}

/// The holder of `key` as `locker` sees it; panics with `why` where the
/// lock is free.
pub(crate) async fn holder_of(locker: &Locker, key: &str, why: &str) -> LockInfo {
    locker.inspect(key).await.unwrap().expect(why)
}

/// The guard a lock call spawned in a task of its own returns, within
/// `within`; panics naming `who` if it took no lock.
pub(crate) async fn taken(
    waiting: JoinHandle<Result<LockGuard, LockError>>,
    who: &str,
    within: Duration,
) -> LockGuard {
    tokio::time::timeout(within, waiting)
        .await
        .unwrap_or_else(|_| panic!("{who} never took the lock"))
        .unwrap()
        .unwrap_or_else(|e| panic!("{who} failed to take the lock: {e}"))
}
