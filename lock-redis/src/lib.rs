#![doc = include_str!("../README.md")]

mod backend;
pub mod config;
mod conn;
mod floor;
mod grants;
pub mod keys;
mod pubsub;
mod queue;
mod redlock;
pub mod renewal;
mod scripts;

use std::sync::Arc;

use lock_core::{Backend, LockError};

pub use backend::RedisBackend;
pub use config::{NodeAddr, RedisConfig, TlsConfig, Topology};
pub use lock_core::Secret;
pub use redlock::RedlockBackend;
pub use renewal::RenewalStats;

/// The URL schemes this crate serves.
pub const SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "redis+cluster",
    "rediss+cluster",
    "redlock",
    "redlocks",
];

/// Opens the backend `config` describes: [`RedisBackend`] for a single
/// instance or a cluster, [`RedlockBackend`] for independent masters.
pub async fn open(config: RedisConfig) -> Result<Arc<dyn Backend>, LockError> {
    Ok(match config.topology {
        Topology::Single | Topology::Cluster => Arc::new(RedisBackend::connect(config).await?),
        Topology::Redlock => Arc::new(RedlockBackend::connect(config).await?),
    })
}
