#![doc = include_str!("../README.md")]
//!
//! ## Cargo features
//!
//! None: everything the etcd store does is always built.
#![deny(missing_docs)]

mod backend;
mod client;
mod concurrency;
mod config;
mod core;
mod diagnosis;
mod held;
mod keys;
mod limit;
mod names;
mod observe;
mod queue;
mod session;
mod value;
mod watch;

use std::sync::Arc;

use lock_core::backend::{Backend, Store};
use lock_core::url::{known_stores, StoreUrl};
use lock_core::LockError;

pub use backend::EtcdBackend;
pub use config::{EtcdConfig, EtcdLayout, DEFAULT_PORT, DEFAULT_RESPONSE_TIMEOUT};

/// The etcd store's plug-in: `etcd://` and `etcds://` (TLS) URLs, read
/// into an [`EtcdConfig`] and opened as an [`EtcdBackend`].
#[derive(Clone, Copy, Debug)]
pub struct EtcdStore;

impl Store for EtcdStore {
    const NAME: &'static str = known_stores::ETCD.name;
    const SCHEMES: &'static [&'static str] = known_stores::ETCD.schemes;
    type Config = EtcdConfig;

    fn config(url: &mut StoreUrl) -> Result<EtcdConfig, LockError> {
        EtcdConfig::from_url(url)
    }

    async fn open(config: EtcdConfig) -> Result<Arc<dyn Backend>, LockError> {
        Ok(Arc::new(EtcdBackend::connect(config).await?))
    }
}
