#![doc = include_str!("../README.md")]
//!
//! ## Cargo features
#![doc = document_features::document_features!()]
// On docs.rs (nightly rustdoc), items behind a cargo feature are marked
// with it.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod acquire;
mod ahead;
mod backend;
mod cleanup;
mod config;
mod contended;
mod contender;
mod curator;
mod delayed;
mod diagnosis;
mod error;
mod held;
mod holders;
mod layout;
mod locks;
mod names;
mod observe;
mod permit_wait;
mod permits;
mod purge;
mod session;
mod sessions;
mod tls;
mod value;
mod watch;

use std::sync::Arc;

use lock_core::backend::{Backend, Store};
use lock_core::url::{known_stores, StoreUrl};
use lock_core::LockError;

pub use backend::ZkBackend;
pub use config::{DigestAuth, ZkConfig, DEFAULT_PORT};
pub use layout::Layout;
pub use names::DEFAULT_BASE;

/// The ZooKeeper store's plug-in: `zk://` and `zks://` (TLS, cargo feature
/// `tls`) URLs, read into a [`ZkConfig`] and opened as a [`ZkBackend`]
/// (whose session is opened on first use).
#[derive(Clone, Copy, Debug)]
pub struct ZkStore;

impl Store for ZkStore {
    const NAME: &'static str = known_stores::ZOOKEEPER.name;
    const SCHEMES: &'static [&'static str] = known_stores::ZOOKEEPER.schemes;
    type Config = ZkConfig;

    fn config(url: &mut StoreUrl) -> Result<ZkConfig, LockError> {
        ZkConfig::from_url(url)
    }

    async fn open(config: ZkConfig) -> Result<Arc<dyn Backend>, LockError> {
        Ok(Arc::new(ZkBackend::new(config)?))
    }
}
