//! The stores this build can open: each store crate's plug-in
//! ([`Store`]), behind the cargo feature that compiles it in, and the
//! schemes it serves. Adding a store is one crate and one line in
//! [`stores`].

use std::future::Future;
use std::pin::Pin;

use lock_core::backend::{open_store, Store};
use lock_core::memory::MemoryStore;
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
    fn missing(
        name: &'static str,
        feature: &'static str,
        schemes: &'static [&'static str],
    ) -> Self {
        Self {
            name,
            feature: Some(feature),
            schemes,
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

/// Whether two scheme lists are the same, at compile time.
#[allow(dead_code)] // unused when no optional store is compiled in
const fn same_schemes(a: &[&str], b: &[&str]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        let (x, y) = (a[i].as_bytes(), b[i].as_bytes());
        if x.len() != y.len() {
            return false;
        }
        let mut j = 0;
        while j < x.len() {
            if x[j] != y[j] {
                return false;
            }
            j += 1;
        }
        i += 1;
    }
    true
}

/// One optional store: its feature, plug-in, name and schemes. The schemes
/// are written here for builds without the feature, and checked against
/// the store's own list at compile time in builds with it.
macro_rules! optional_store {
    ($feature:literal, $store:path, $name:literal, [$($scheme:literal),+ $(,)?]) => {{
        #[cfg(feature = $feature)]
        let entry = {
            const _: () = assert!(
                same_schemes(<$store as Store>::SCHEMES, &[$($scheme),+]),
                concat!("the schemes listed for `", $feature, "` differ from the store's")
            );
            StoreEntry::compiled::<$store>(Some($feature))
        };
        #[cfg(not(feature = $feature))]
        let entry = StoreEntry::missing($name, $feature, &[$($scheme),+]);
        entry
    }};
}

/// Every store the facade knows, compiled in or not.
pub(crate) fn stores() -> [StoreEntry; 5] {
    [
        StoreEntry::compiled::<MemoryStore>(None),
        optional_store!("file", lock_file::FileStore, "file", ["file"]),
        optional_store!(
            "redis",
            lock_redis::RedisStore,
            "Redis",
            [
                "redis",
                "rediss",
                "redis+cluster",
                "rediss+cluster",
                "redlock",
                "redlocks",
                "redis+sentinel",
                "rediss+sentinel"
            ]
        ),
        optional_store!("etcd", lock_etcd::EtcdStore, "etcd", ["etcd", "etcds"]),
        optional_store!(
            "zookeeper",
            lock_zookeeper::ZkStore,
            "ZooKeeper",
            ["zk", "zks"]
        ),
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
