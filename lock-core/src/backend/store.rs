//! [`Store`]: the one shape in which every store plugs into `connect`.
//!
//! Reading a URL with a store and opening it are in `crate::open`, above
//! both this trait and the URL readers; they are re-exported as
//! [`open_store`](crate::open::open_store) and
//! [`url::parse`](crate::open::parse).

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use super::Backend;
use crate::error::LockError;
use crate::url::StoreUrl;

/// A kind of store: the URL schemes it serves, its settings read from a
/// URL, and how to open it. Each store crate has one (`FileStore`,
/// `RedisStore`, ...), and the facade's `connect` walks the compiled-in
/// ones by scheme.
///
/// ```
/// use lock_core::backend::Store;
/// use lock_core::open::open_store;
/// use lock_core::memory::MemoryStore;
///
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// assert_eq!(MemoryStore::SCHEMES, ["mem"]);
/// let config = lock_core::open::parse::<MemoryStore>("mem://jobs?ttl=5s")?.config;
/// assert_eq!(config.name, "jobs");
/// let locks = open_store::<MemoryStore>("mem://jobs?ttl=5s").await?;
/// assert_eq!(locks.options().ttl, std::time::Duration::from_secs(5));
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
pub trait Store: 'static {
    /// The kind of store's name in messages about its URLs and settings
    /// (`Redis`, `ZooKeeper`, `etcd`), written as its users write it.
    ///
    /// Not [`Backend::name`]: that is the lowercase label of one opened
    /// backend in metrics, traces and [`LockError::NotSupported`]
    /// (`redis`, `redis-cluster`, `redlock`, `zookeeper`), and one store
    /// may open several kinds of backend.
    const NAME: &'static str;

    /// The URL schemes this store serves (`["etcd", "etcds"]`).
    const SCHEMES: &'static [&'static str];

    /// The store's settings. `Debug` must not show credentials.
    type Config: fmt::Debug + Send + 'static;

    /// Reads the store's settings from `url`, whose scheme is one of
    /// [`SCHEMES`](Self::SCHEMES): hosts, path, credentials and the store's
    /// own options (taken from [`StoreUrl::options`]; whatever is left is
    /// refused afterwards). Errors are [`LockError::InvalidConfig`] and never
    /// show credentials (quote [`StoreUrl::shown`]).
    ///
    /// Called through [`crate::open::parse`], never directly, so that every
    /// store reads its URL the same way.
    fn config(url: &mut StoreUrl) -> Result<Self::Config, LockError>;

    /// Opens the store `config` describes. Stores that connect eagerly
    /// fail here with [`LockError::Unavailable`] when unreachable.
    fn open(
        config: Self::Config,
    ) -> impl Future<Output = Result<Arc<dyn Backend>, LockError>> + Send;
}
