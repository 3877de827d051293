//! What the tests of this crate share.

use lock_core::backend::open_store;
use lock_core::{LockError, Locker};
use lock_redis::RedisStore;

/// Opens a locker on the Redis deployment `url` names, without the
/// `distlock` facade.
pub(crate) async fn connect(url: &str) -> Result<Locker, LockError> {
    open_store::<RedisStore>(url).await
}
