//! What the tests of this crate share.

use lock_core::backend::open_store;
use lock_core::{LockError, Locker};
use lock_zookeeper::ZkStore;

/// Opens a locker on the ZooKeeper deployment `url` names, without the
/// `distlock` facade.
pub(crate) async fn connect(url: &str) -> Result<Locker, LockError> {
    open_store::<ZkStore>(url).await
}
