#![doc = include_str!("../README.md")]

mod backend;
mod client;
pub mod config;
mod floor;
mod held;
pub mod keys;
mod names;
mod queue;
mod session;
mod watch;

use std::sync::Arc;

use lock_core::{Backend, LockError};

pub use backend::EtcdBackend;
pub use config::{EtcdConfig, PemFile, TlsFiles};
pub use lock_core::Secret;

/// The URL schemes this crate serves: `etcd://` and `etcds://` (TLS).
pub const SCHEMES: &[&str] = &["etcd", "etcds"];

/// Opens an [`EtcdBackend`] on the cluster `config` describes.
pub async fn open(config: EtcdConfig) -> Result<Arc<dyn Backend>, LockError> {
    Ok(Arc::new(EtcdBackend::connect(config).await?))
}
