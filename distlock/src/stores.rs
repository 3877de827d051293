//! The stores this build can open: each store crate's plug-in
//! ([`Store`]), behind the cargo feature that compiles it in, and the
//! schemes it serves. Adding a store is one crate and one line in
//! [`stores`].

use std::future::Future;
use std::pin::Pin;

use lock_core::backend::Store;
use lock_core::memory::MemoryStore;
use lock_core::open::open_store;
use lock_core::url::known_stores::KnownStore;
use lock_core::{LockError, Locker};

type Connecting<'a> = Pin<Box<dyn Future<Output = Result<Locker, LockError>> + Send + 'a>>;

/// One store of the table: compiled in, or named by a feature that is off.
#[derive(Clone, Copy)]
pub(crate) struct StoreEntry {
    /// The store's name in messages.
    pub(crate) name: &'static str,
    /// The cargo feature of `distlock` that compiles it in (`None`: always).
    pub(crate) feature: Option<&'static str>,
    /// The URL schemes it serves.
    pub(crate) schemes: &'static [&'static str],
    /// Opens a locker on a URL of one of its schemes; `None` when the
    /// feature is off.
    pub(crate) connect: Option<for<'a> fn(&'a str) -> Connecting<'a>>,
}

impl StoreEntry {
    fn compiled<S: Store>(feature: Option<&'static str>) -> Self {
        Self {
            name: S::NAME,
            feature,
            schemes: S::SCHEMES,
            connect: Some(|url| Box::pin(open_store::<S>(url))),
        }
    }

    #[allow(dead_code)] // unused when every feature is on
    fn missing(store: KnownStore, feature: &'static str) -> Self {
        Self {
            name: store.name,
            feature: Some(feature),
            schemes: store.schemes,
            connect: None,
        }
    }

    /// The error for a URL of this store when its feature is off.
    pub(crate) fn not_compiled(&self) -> LockError {
        let feature = self.feature.unwrap_or("default");
        LockError::invalid_config(format!(
            "{} locks are not compiled into this build: rebuild with the `{feature}` feature enabled (a cargo feature of distlock, and of distlock-cli for the command)",
            self.name
        ))
    }
}

/// One optional store: its feature and plug-in, and its entry in
/// [`lock_core::url::known_stores`], which builds without the feature use to
/// name it.
macro_rules! optional_store {
    ($feature:literal, $store:path, $known:ident) => {{
        #[cfg(feature = $feature)]
        let entry = StoreEntry::compiled::<$store>(Some($feature));
        #[cfg(not(feature = $feature))]
        let entry = StoreEntry::missing(lock_core::url::known_stores::$known, $feature);
        entry
    }};
}

/// Every store the facade knows, compiled in or not.
pub(crate) fn stores() -> [StoreEntry; 6] {
    [
        StoreEntry::compiled::<MemoryStore>(None),
        optional_store!("file", lock_file::FileStore, FILE),
        optional_store!("redis", lock_redis::RedisStore, REDIS),
        optional_store!("etcd", lock_etcd::EtcdStore, ETCD),
        optional_store!("zookeeper", lock_zookeeper::ZkStore, ZOOKEEPER),
        optional_store!("postgres", lock_postgres::PgStore, POSTGRES),
    ]
}

/// The store serving `scheme`; an unknown scheme is an error listing the
/// schemes this build serves (and those other features would add).
pub(crate) fn store_for(scheme: &str) -> Result<StoreEntry, LockError> {
    let all = stores();
    if let Some(entry) = all.iter().find(|e| e.schemes.contains(&scheme)) {
        return Ok(*entry);
    }
    let list = |compiled: bool| {
        all.iter()
            .filter(|e| e.connect.is_some() == compiled)
            .flat_map(|e| e.schemes)
            .map(|s| format!("{s}://"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut message = format!(
        "unknown lock URL scheme `{scheme}://` (known: {}",
        list(true)
    );
    let others = list(false);
    if !others.is_empty() {
        message.push_str(&format!("; with other cargo features: {others}"));
    }
    message.push(')');
    Err(LockError::invalid_config(message))
}
