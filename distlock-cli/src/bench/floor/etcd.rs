//! The etcd floor: put-if-absent transaction + delete, on a client of its
//! own that the store's config sets up as the store's: the two writes any
//! etcd lock needs, with none of distlock's machinery (no lease, no queue
//! read, no watch). Unlike the other floors it deletes even where its put
//! found the key taken (and then fails).

use std::fmt;

use distlock::{LockError, LockName};
use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use lock_etcd::EtcdStore;

use super::{escape, taken, Floor, FloorProbe, PAYLOAD};

/// The floor of an etcd URL, on a client set up as the store's.
pub(super) async fn open(url: &str) -> Result<Floor, LockError> {
    let config = lock_core::open::parse::<EtcdStore>(url)?.config;
    let client = config.connect().await?;
    Ok(Box::new(EtcdFloor { client }))
}

/// Where the floor writes for `name`: outside the store's `distlock/`
/// prefix, so never in a lock's queue.
fn floor_key(name: &LockName) -> String {
    let key = escape(name.key().as_str());
    format!("distlock-floor/{}/{key}", name.namespace())
}

struct EtcdFloor {
    client: Client,
}

impl fmt::Debug for EtcdFloor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdFloor").finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl FloorProbe for EtcdFloor {
    fn describe(&self) -> String {
        "txn(create_revision == 0 → put) + delete: 2 etcd writes".to_owned()
    }

    async fn lock_release_once(&self, name: &LockName) -> Result<(), LockError> {
        let key = floor_key(name);
        let mut kv = self.client.kv_client();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), PAYLOAD, None)]);
        let took = kv
            .txn(txn)
            .await
            .map_err(|e| error("floor probe: put-if-absent", e))?;
        // Deletes whether or not it took the key: every call is the same
        // two writes, as the floor's figures have always counted them.
        kv.delete(key.clone(), None)
            .await
            .map_err(|e| error("floor probe: delete", e))?;
        if !took.succeeded() {
            return Err(taken(format_args!("key `{key}`")));
        }
        Ok(())
    }

    fn describe_round_trip(&self) -> String {
        "get: 1 linearizable etcd read".to_owned()
    }

    async fn round_trip_once(&self, name: &LockName) -> Result<(), LockError> {
        self.client
            .kv_client()
            .get(floor_key(name), None)
            .await
            .map_err(|e| error("floor probe: get", e))?;
        Ok(())
    }
}

/// Transport trouble and gRPC `Unavailable` are `Unavailable`, the rest
/// `Backend`.
fn error(what: &str, error: etcd_client::Error) -> LockError {
    use etcd_client::Error as E;
    const UNAVAILABLE: i32 = 14;
    let message = format!("{what}: {error}");
    match &error {
        E::TransportError(_) | E::IoError(_) => LockError::unavailable(message, error),
        E::GRpcStatus(status) if status.code() as i32 == UNAVAILABLE => {
            LockError::unavailable(message, error)
        }
        _ => LockError::backend(message, error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_key_stays_outside_every_lock_queue() {
        for key in ["k", "a/b", "../x", "distlock/ns/k"] {
            let floor = floor_key(&LockName::parse("ns", key).unwrap());
            assert!(!floor.starts_with("distlock/"), "{floor}");
            assert!(floor.starts_with("distlock-floor/ns/"), "{floor}");
        }
        assert_eq!(
            floor_key(&LockName::parse("ns", "a/b").unwrap()),
            "distlock-floor/ns/a%2Fb"
        );
    }
}
