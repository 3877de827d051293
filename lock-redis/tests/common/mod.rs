//! What the tests of this crate share.

use lock_core::backend::open_store;
use lock_core::{LockError, LockInfo, Locker};
use lock_redis::RedisStore;

/// Opens a locker on the Redis deployment `url` names, without the
/// `distlock` facade.
pub(crate) async fn connect(url: &str) -> Result<Locker, LockError> {
    open_store::<RedisStore>(url).await
}

/// The holder of `key` as `locker` sees it; panics with `why` where the
/// lock is free.
#[allow(dead_code)] // not every test binary looks
pub(crate) async fn holder_of(locker: &Locker, key: &str, why: &str) -> LockInfo {
    locker.inspect(key).await.unwrap().expect(why)
}
