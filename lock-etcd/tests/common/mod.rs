//! What the tests of this crate share.

use lock_core::open::open_store;
use lock_core::{LockError, Locker};
use lock_etcd::EtcdStore;

/// Opens a locker on the etcd cluster `url` names, without the `distlock`
/// facade.
pub(crate) async fn connect(url: &str) -> Result<Locker, LockError> {
    open_store::<EtcdStore>(url).await
}
