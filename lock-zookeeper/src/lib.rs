#![doc = include_str!("../README.md")]

mod ahead;
mod backend;
pub mod config;
mod contended;
mod delayed;
mod error;
mod floor;
mod held;
pub mod names;
mod queue;
mod session;
mod tls;
mod watch;

use std::sync::Arc;

use lock_core::{Backend, LockError};

pub use backend::ZkBackend;
pub use config::{DigestAuth, TlsFiles, ZkConfig, DEFAULT_PORT};

/// The URL schemes this crate serves: `zk://` and `zks://` (TLS).
pub const SCHEMES: &[&str] = &["zk", "zks"];

/// Opens the backend `config` describes. The session is opened on first
/// use; see [`ZkBackend::new`] for what fails here.
pub fn open(config: ZkConfig) -> Result<Arc<dyn Backend>, LockError> {
    Ok(Arc::new(ZkBackend::new(config)?))
}
