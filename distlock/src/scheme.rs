//! The URL schemes distlock knows, and which cargo feature serves each.

use std::fmt;

use lock_core::LockError;

/// A lock store, as named by a URL scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scheme {
    /// `mem://NAME`: in-process memory (always available).
    Memory,
    /// `file:///dir`: local flock(2) locks.
    File,
    /// `redis://` / `rediss://`: a single Redis instance.
    Redis,
    /// `redis+cluster://`: Redis Cluster.
    RedisCluster,
    /// `redlock://`: Redlock over independent Redis masters.
    Redlock,
    /// `etcd://` / `etcds://`: etcd v3.
    Etcd,
    /// `zk://` / `zks://`: ZooKeeper.
    ZooKeeper,
}

/// Every scheme string, as shown in errors.
pub const KNOWN_SCHEMES: &[&str] = &[
    "mem",
    "file",
    "redis",
    "rediss",
    "redis+cluster",
    "redlock",
    "etcd",
    "etcds",
    "zk",
    "zks",
];

impl Scheme {
    /// The store a URL scheme names; an unknown scheme lists the known ones.
    pub fn parse(scheme: &str) -> Result<Self, LockError> {
        Ok(match scheme {
            "mem" => Self::Memory,
            "file" => Self::File,
            "redis" | "rediss" => Self::Redis,
            "redis+cluster" | "rediss+cluster" => Self::RedisCluster,
            "redlock" | "redlocks" => Self::Redlock,
            "etcd" | "etcds" => Self::Etcd,
            "zk" | "zks" => Self::ZooKeeper,
            other => {
                return Err(LockError::invalid_config(format!(
                    "unknown lock URL scheme `{other}://` (known: {})",
                    KNOWN_SCHEMES
                        .iter()
                        .map(|s| format!("{s}://"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
        })
    }

    /// The cargo feature of the `distlock` crate that serves this scheme
    /// (`None` for memory, which is always there).
    pub fn feature(self) -> Option<&'static str> {
        match self {
            Self::Memory => None,
            Self::File => Some("file"),
            Self::Redis | Self::RedisCluster | Self::Redlock => Some("redis"),
            Self::Etcd => Some("etcd"),
            Self::ZooKeeper => Some("zookeeper"),
        }
    }

    /// The error for a scheme whose feature was not compiled in.
    pub(crate) fn not_compiled(self) -> LockError {
        let feature = self.feature().unwrap_or("default");
        LockError::invalid_config(format!(
            "{self} locks are not compiled into this build: rebuild with the `{feature}` feature enabled (a cargo feature of distlock, and of distlock-cli for the command)"
        ))
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Memory => "memory",
            Self::File => "file",
            Self::Redis => "Redis",
            Self::RedisCluster => "Redis Cluster",
            Self::Redlock => "Redlock",
            Self::Etcd => "etcd",
            Self::ZooKeeper => "ZooKeeper",
        })
    }
}
