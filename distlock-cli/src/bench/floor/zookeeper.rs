//! The ZooKeeper floor: create an EPHEMERAL_SEQUENTIAL node and delete
//! it, the two round trips every ZooKeeper lock recipe makes at least, on
//! a session of its own that the store's config opens as the store's
//! (session timeout, digest auth, TLS), with the store's ACLs; and the raw
//! watch + re-read recipe of the observe row ([`notify`]).

mod notify;

use distlock::{LockError, LockName};
use lock_zookeeper::{ZkConfig, ZkStore};
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

use super::{escape, Floor, FloorProbe, NotifyProbe, PAYLOAD};

/// The floor's directory under the store's base. A namespace cannot
/// contain `+`, so no real lock directory lies under it.
const FLOOR_DIR: &str = "bench+floor";

/// The floor of a `zk://` or `zks://` URL.
pub(super) async fn open(url: &str) -> Result<Floor, LockError> {
    let config = lock_core::open::parse::<ZkStore>(url)?.config;
    Ok(Box::new(ZkFloor {
        client: config.connect().await?,
        dir: floor_dir(&config),
        acls: config.acls(),
        config,
    }))
}

fn floor_dir(config: &ZkConfig) -> String {
    format!("{}/{FLOOR_DIR}", config.base)
}

#[derive(Debug)]
struct ZkFloor {
    client: Client,
    /// `<base>/bench+floor`.
    dir: String,
    /// The ACLs the store gives its nodes.
    acls: Acls<'static>,
    /// What opens the raw watchers' sessions.
    config: ZkConfig,
}

impl ZkFloor {
    /// `<floor dir>/<namespace>/<escaped key>`: the parent of `name`'s nodes.
    fn parent(&self, name: &LockName) -> String {
        let key = escape(name.key().as_str());
        format!("{}/{}/{key}", self.dir, name.namespace())
    }
}

#[async_trait::async_trait]
impl FloorProbe for ZkFloor {
    fn describe(&self) -> String {
        "create EPHEMERAL_SEQUENTIAL + delete".to_owned()
    }

    async fn lock_release_once(&self, name: &LockName) -> Result<(), LockError> {
        let dir = self.parent(name);
        let prefix = format!("{dir}/floor-");
        let node = CreateMode::EphemeralSequential.with_acls(self.acls);
        let created = match self.client.create(&prefix, PAYLOAD.as_bytes(), &node).await {
            Err(ZkError::NoNode) => {
                // First use of this name: make its directory, once.
                let dirs = CreateMode::Container.with_acls(self.acls);
                self.client
                    .mkdir(&dir, &dirs)
                    .await
                    .map_err(|e| error(&format!("create {dir}"), e))?;
                self.client.create(&prefix, PAYLOAD.as_bytes(), &node).await
            }
            other => other,
        };
        let (_, sequence) = created.map_err(|e| error("create a floor node", e))?;
        self.client
            .delete(&format!("{prefix}{sequence}"), None)
            .await
            .map_err(|e| error("delete a floor node", e))
    }

    fn describe_round_trip(&self) -> String {
        "exists".to_owned()
    }

    async fn round_trip_once(&self, name: &LockName) -> Result<(), LockError> {
        self.client
            .check_stat(&self.parent(name))
            .await
            .map(drop)
            .map_err(|e| error("exists", e))
    }

    async fn open_notify(
        &self,
        name: &LockName,
        observers: usize,
    ) -> Result<Option<Box<dyn NotifyProbe>>, LockError> {
        let probe = notify::open(&self.config, self.acls, &self.parent(name), observers).await?;
        Ok(Some(Box::new(probe)))
    }
}

/// Connection and session trouble is `Unavailable`, refused credentials
/// `InvalidConfig`, the rest `Backend`.
fn error(what: &str, error: ZkError) -> LockError {
    let message = format!("floor probe: {what}: {error}");
    match error {
        ZkError::NoAuth | ZkError::AuthFailed => LockError::invalid_config(message),
        ZkError::ConnectionLoss
        | ZkError::Timeout
        | ZkError::NoHosts
        | ZkError::SessionExpired
        | ZkError::ClientClosed
        | ZkError::Custom(_) => LockError::unavailable(message, error),
        error => LockError::backend(message, error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_directory_is_no_lock_directory() {
        let config = lock_core::open::parse::<ZkStore>("zk://h/apps")
            .unwrap()
            .config;
        assert_eq!(floor_dir(&config), "/apps/bench+floor");
        assert!(LockName::parse(FLOOR_DIR, "k").is_err());
    }
}
