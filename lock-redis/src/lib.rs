#![doc = include_str!("../README.md")]
//!
//! ## Cargo features
//!
//! None: everything the Redis stores does is always built.
#![deny(missing_docs)]

mod abandon;
mod acquire;
mod backend;
mod client;
mod config;
mod conn;
mod core;
mod counter;
mod deadline;
mod diagnosis;
mod errors;
mod grants;
mod held;
mod keys;
mod leaving;
mod link;
mod pubsub;
mod purge;
mod queue;
pub mod raw;
mod redlock;
mod renewal;
mod retry;
mod scripts;
mod sentinel;
mod shared;
mod value;
mod watch;

use std::sync::Arc;

use lock_core::backend::{Backend, Store};
use lock_core::url::{known_stores, StoreUrl};
use lock_core::LockError;

pub use backend::RedisBackend;
pub use config::{
    RedisConfig, Topology, DEFAULT_PORT, DEFAULT_RESPONSE_TIMEOUT, DEFAULT_SENTINEL_PORT,
};
pub use redlock::RedlockBackend;

/// The Redis store's plug-in: one instance (`redis://`, `rediss://`), a
/// cluster (`redis+cluster://`, `rediss+cluster://`), the master Redis
/// Sentinel names (`redis+sentinel://`, `rediss+sentinel://`) or
/// independent Redlock masters (`redlock://`, `redlocks://`), read into a
/// [`RedisConfig`] and opened as a [`RedisBackend`] or a
/// [`RedlockBackend`].
#[derive(Clone, Copy, Debug)]
pub struct RedisStore;

impl Store for RedisStore {
    const NAME: &'static str = known_stores::REDIS.name;
    const SCHEMES: &'static [&'static str] = known_stores::REDIS.schemes;
    type Config = RedisConfig;

    fn config(url: &mut StoreUrl) -> Result<RedisConfig, LockError> {
        RedisConfig::from_url(url)
    }

    async fn open(config: RedisConfig) -> Result<Arc<dyn Backend>, LockError> {
        Ok(match config.topology {
            Topology::Single => {
                let manager = config.connection_manager(&config.nodes[0])?;
                let conn = conn::Conn::single(manager, &config.nodes[0]);
                Arc::new(RedisBackend::connect(conn, config).await?)
            }
            Topology::Cluster => {
                let cluster = config.cluster_connection().await?;
                let conn = conn::Conn::cluster(cluster, &config.nodes);
                Arc::new(RedisBackend::connect(conn, config).await?)
            }
            Topology::Sentinel => {
                let conn = conn::Conn::Sentinel(sentinel::MasterLink::new(&config)?);
                Arc::new(RedisBackend::connect(conn, config).await?)
            }
            Topology::Redlock => Arc::new(RedlockBackend::connect(config).await?),
        })
    }
}
