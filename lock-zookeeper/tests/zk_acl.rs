//! ZooKeeper digest auth and ACLs: with credentials in the URL, locks are
//! created readable and deletable only by the same credentials.

mod common;

use common::{connect, holder_of, local_standalone};
use distlock_testkit::layout::{zk_contenders, zk_lock_dir};
use distlock_testkit::zookeeper::zk_url;
use lock_core::{LockError, Locker};
use zookeeper_client::{Client, Error as ZkError};

async fn locker(addr: std::net::SocketAddr, credentials: &str) -> Locker {
    let query = format!("{credentials}&ttl=3s&namespace=acl");
    connect(&zk_url(&[addr], "/acl-tests", &query))
        .await
        .unwrap()
}

/// The holder's node of `key`, seen by its owner.
async fn holder_node(owner: &Locker, addr: std::net::SocketAddr, key: &str) -> String {
    let dir = zk_lock_dir("/acl-tests", &owner.name(key).unwrap());
    let client = Client::connector()
        .with_auth("digest", b"alice:secret")
        .connect(&addr.to_string())
        .await
        .unwrap();
    let children = client.list_children(&dir).await.unwrap();
    let first = zk_contenders(&children)[0].to_owned();
    format!("{dir}/{first}")
}

fn assert_not_authorized<T: std::fmt::Debug>(result: Result<T, LockError>, what: &str) {
    match result {
        Err(LockError::PermissionDenied {
            message: reason, ..
        }) => {
            assert!(reason.contains("not authorized"), "{what}: {reason}");
            assert!(reason.contains("credentials"), "{what}: {reason}");
            assert!(
                !reason.contains("secret") && !reason.contains("wrong"),
                "{what}: {reason}"
            );
        }
        other => panic!("{what}: expected PermissionDenied, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_credentials_cannot_delete_a_held_lock() {
    let addr = local_standalone().await;
    let alice = locker(addr, "user=alice&password=secret").await;
    let guard = alice.lock("k").await.unwrap();
    let node = holder_node(&alice, addr, "k").await;

    for auth in [Some(&b"bob:other"[..]), Some(b"alice:wrong"), None] {
        let mut connector = Client::connector();
        if let Some(auth) = auth {
            connector = connector.with_auth("digest", auth);
        }
        let client = connector.connect(&addr.to_string()).await.unwrap();
        assert_eq!(client.delete(&node, None).await, Err(ZkError::NoAuth));
        assert_eq!(client.get_data(&node).await.map(drop), Err(ZkError::NoAuth));
    }
    assert!(guard.is_held());
    let info = holder_of(&alice, "k", "still held").await;
    assert_eq!(info.owner, guard.owner().as_str());
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_give_a_clear_error() {
    let addr = local_standalone().await;
    let alice = locker(addr, "user=alice&password=secret").await;
    let guard = alice.lock("held").await.unwrap();
    for credentials in ["user=alice&password=wrong", "user=bob&password=other"] {
        let intruder = locker(addr, credentials).await;
        assert_not_authorized(intruder.try_lock("held").await, "try_lock");
        assert_not_authorized(intruder.inspect("held").await, "inspect");
        assert_not_authorized(intruder.force_release("held").await, "force_release");
        assert_not_authorized(intruder.try_lock("other-key").await, "try_lock");
    }
    assert!(guard.is_held());
    guard.release().await.unwrap();
}
