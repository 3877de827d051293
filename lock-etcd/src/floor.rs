//! The benchmark floor: the raw requests of one uncontended lock+release.

use std::fmt;

use async_trait::async_trait;
use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use lock_core::{FloorProbe, LockError, LockName};

use crate::client::{connect, map_error};
use crate::config::EtcdConfig;
use crate::keys;

/// Put-if-absent transaction + delete, on a client of its own: the two
/// writes any etcd lock needs, with none of distlock's machinery (no
/// lease, no queue read, no watch).
pub(crate) struct EtcdFloorProbe {
    client: Client,
}

impl EtcdFloorProbe {
    /// Opens the probe's own client.
    pub(crate) async fn connect(config: &EtcdConfig) -> Result<Self, LockError> {
        Ok(Self {
            client: connect(config).await?,
        })
    }
}

#[async_trait]
impl FloorProbe for EtcdFloorProbe {
    fn describe(&self) -> String {
        "txn(create_revision == 0 → put) + delete: 2 etcd writes".to_owned()
    }

    async fn lock_release_once(&self, name: &LockName) -> Result<(), LockError> {
        let key = keys::floor_key(name);
        let mut kv = self.client.kv_client();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), "floor", None)]);
        let taken = kv
            .txn(txn)
            .await
            .map_err(|e| map_error("floor probe: put-if-absent failed", e))?;
        kv.delete(key, None)
            .await
            .map_err(|e| map_error("floor probe: delete failed", e))?;
        if !taken.succeeded() {
            return Err(LockError::Backend {
                message: "floor probe: the probe key was taken (another probe on the same name?)"
                    .to_owned(),
                source: None,
            });
        }
        Ok(())
    }
}

impl fmt::Debug for EtcdFloorProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdFloorProbe").finish_non_exhaustive()
    }
}
