//! The benchmark floor: one uncontended lock+release as raw ZooKeeper
//! requests on a session of its own, with none of distlock's machinery.

use std::sync::Arc;

use lock_core::{async_trait, FloorProbe, LockError, LockName};
use zookeeper_client::{CreateMode, Error as ZkError};

use crate::config::ZkConfig;
use crate::error;
use crate::names::{lock_dir, node_prefix};
use crate::session::Session;

/// Creates an ephemeral sequential node and deletes it: the two round
/// trips every ZooKeeper lock recipe makes at least.
#[derive(Debug)]
pub(crate) struct ZkFloor {
    session: Session,
}

impl ZkFloor {
    pub(crate) async fn open(config: Arc<ZkConfig>) -> Result<Self, LockError> {
        Ok(Self {
            session: Session::open(config).await?,
        })
    }
}

#[async_trait]
impl FloorProbe for ZkFloor {
    fn describe(&self) -> String {
        "create EPHEMERAL_SEQUENTIAL + delete".to_owned()
    }

    async fn lock_release_once(&self, name: &LockName) -> Result<(), LockError> {
        let client = self.session.client();
        let dir = lock_dir(self.session.base(), name);
        let prefix = node_prefix(&dir, "floor");
        let options = CreateMode::EphemeralSequential.with_acls(self.session.acls());
        let created = match client.create(&prefix, b"floor", &options).await {
            Err(ZkError::NoNode) => {
                // First use of this key: make the directory, once.
                let dirs = CreateMode::Container.with_acls(self.session.acls());
                client
                    .mkdir(&dir, &dirs)
                    .await
                    .map_err(|e| error::map(&format!("create {dir}"), e))?;
                client.create(&prefix, b"floor", &options).await
            }
            other => other,
        };
        let (_, sequence) = created.map_err(|e| error::map("create a floor node", e))?;
        client
            .delete(&format!("{prefix}{sequence}"), None)
            .await
            .map_err(|e| error::map("delete a floor node", e))
    }
}
