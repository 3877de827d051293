#![doc = include_str!("../README.md")]
//!
//! ## Cargo features
//!
//! None: everything the PostgreSQL store does is always built.
#![deny(missing_docs)]

mod acquire;
mod backend;
mod channel;
mod config;
mod connect;
mod core;
mod diagnosis;
mod errors;
mod held;
mod listen;
mod schema;
mod session;
mod statements;
mod tls;

use std::sync::Arc;

use lock_core::backend::{Backend, Store};
use lock_core::url::{known_stores, StoreUrl};
use lock_core::LockError;

pub use backend::PgBackend;
pub use config::{
    PgConfig, SslMode, DEFAULT_APPLICATION_NAME, DEFAULT_PORT, DEFAULT_RESPONSE_TIMEOUT,
};
pub use connect::POOL_SIZE;
pub use schema::{schema_sql, SchemaName, DEFAULT_SCHEMA, SCHEMA_VERSION};

/// The URL schemes of the store, libpq's two spellings.
const SCHEMES: &[&str] = known_stores::POSTGRES.schemes;

/// The PostgreSQL store's plug-in: `postgres://` and `postgresql://`
/// URLs, read into a [`PgConfig`] and opened as a [`PgBackend`].
#[derive(Clone, Copy, Debug)]
pub struct PgStore;

impl Store for PgStore {
    const NAME: &'static str = known_stores::POSTGRES.name;
    const SCHEMES: &'static [&'static str] = SCHEMES;
    type Config = PgConfig;

    fn config(url: &mut StoreUrl) -> Result<PgConfig, LockError> {
        PgConfig::from_url(url)
    }

    async fn open(config: PgConfig) -> Result<Arc<dyn Backend>, LockError> {
        Ok(Arc::new(PgBackend::connect(config).await?))
    }
}
