//! The stores distlock ships, by the name messages give them and the URL
//! schemes they serve, in one place: each store crate serves exactly its
//! list (its [`Store::NAME`] and [`Store::SCHEMES`] are these), and the
//! facade names the store behind a scheme even in a build that leaves
//! that store out.
//!
//! [`Store::NAME`]: crate::backend::Store::NAME
//! [`Store::SCHEMES`]: crate::backend::Store::SCHEMES

/// A store's name in messages and the URL schemes it serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownStore {
    /// The store's name in messages ("Redis", "ZooKeeper").
    pub name: &'static str,
    /// The schemes of its URLs, without `://`.
    pub schemes: &'static [&'static str],
}

/// Lock files in a local directory (`lock-file`).
pub const FILE: KnownStore = KnownStore {
    name: "file",
    schemes: &["file"],
};

/// Redis: one server, a Cluster, a master named by Sentinel, or Redlock
/// over independent masters; the `s` schemes use TLS (`lock-redis`).
pub const REDIS: KnownStore = KnownStore {
    name: "Redis",
    schemes: &[
        "redis",
        "rediss",
        "redis+cluster",
        "rediss+cluster",
        "redlock",
        "redlocks",
        "redis+sentinel",
        "rediss+sentinel",
    ],
};

/// An etcd cluster; `etcds` uses TLS (`lock-etcd`).
pub const ETCD: KnownStore = KnownStore {
    name: "etcd",
    schemes: &["etcd", "etcds"],
};

/// A ZooKeeper ensemble; `zks` uses TLS (`lock-zookeeper`).
pub const ZOOKEEPER: KnownStore = KnownStore {
    name: "ZooKeeper",
    schemes: &["zk", "zks"],
};

/// A PostgreSQL database; TLS is chosen by the `sslmode` option, as libpq
/// does (`lock-postgres`).
pub const POSTGRES: KnownStore = KnownStore {
    name: "PostgreSQL",
    schemes: &["postgres", "postgresql"],
};
