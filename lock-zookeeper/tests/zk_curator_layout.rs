//! `layout=curator` as a raw ZooKeeper client sees it: the node names and
//! data a distlock hold creates are Curator 5.x's (`_c_<uuid>-lock-<seq>`,
//! `latch-`, `__READ__`/`__WRIT__`, a semaphore's `leases/` and `locks/`),
//! a node made by hand in Curator's format holds the lock against
//! distlock, and a path another recipe uses is refused.

mod common;

use common::{connect, SLACK};
use distlock_testkit::zookeeper::{raw_client, shared_standalone, zk_url};
use lock_core::{LockError, LockOptions, Locker};
use zookeeper_client::{Acls, Client, CreateMode};

/// A locker with `layout=curator` under a base path of its own, and a raw
/// session on the same server.
async fn locker(test: &str) -> (Locker, Client, String) {
    let addrs = shared_standalone().await.unwrap_or_else(|e| panic!("{e}"));
    let base = format!("/curator-layout/{test}-{:08x}", fastrand::u32(..));
    let url = zk_url(&addrs, &base, "layout=curator&ttl=10s&namespace=ignored");
    let locker = connect(&url).await.unwrap();
    (locker, raw_client(&addrs).await.unwrap(), base)
}

/// Whether `name` is `_c_<36-char uuid>-<marker><10 digits>`.
fn is_curator_node(name: &str, marker: &str) -> bool {
    let Some(rest) = name.strip_prefix("_c_") else {
        return false;
    };
    let (uuid, tail) = rest.split_at(36.min(rest.len()));
    let uuid_ok = uuid.len() == 36
        && uuid.char_indices().all(|(at, c)| match at {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    let Some(sequence) = tail.strip_prefix('-').and_then(|t| t.strip_prefix(marker)) else {
        return false;
    };
    uuid_ok && sequence.len() == 10 && sequence.bytes().all(|b| b.is_ascii_digit())
}

/// The children of `dir` once `done` holds for them, waiting on child
/// watches (never polling).
async fn children_when(
    client: &Client,
    dir: &str,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let wait = async {
        loop {
            match client.list_and_watch_children(dir).await {
                Ok((children, watcher)) => {
                    if done(&children) {
                        return children;
                    }
                    watcher.changed().await;
                }
                Err(_) => {
                    // Not created yet: wait for its creation.
                    let (stat, watcher) = client.check_and_watch_stat(dir).await.unwrap();
                    if stat.is_none() {
                        watcher.changed().await;
                    }
                }
            }
        }
    };
    tokio::time::timeout(SLACK, wait)
        .await
        .unwrap_or_else(|_| panic!("{dir} never had the children expected"))
}

/// A lock and a leadership each create the node Curator's recipe would,
/// holding the value as data, with the node's czxid as token; releases
/// delete them.
#[tokio::test]
async fn locks_and_leaders_create_curator_nodes() {
    let (locker, raw, base) = locker("names").await;
    let guard = locker
        .lock_with("locks/orders", LockOptions::new().value("v1"))
        .await
        .unwrap();
    let dir = format!("{base}/locks/orders");
    let nodes = raw.list_children(&dir).await.unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert!(is_curator_node(&nodes[0], "lock-"), "{nodes:?}");
    let (data, stat) = raw.get_data(&format!("{dir}/{}", nodes[0])).await.unwrap();
    assert_eq!(
        (data.as_slice(), stat.czxid as u64),
        (&b"v1"[..], guard.token().get())
    );
    guard.release().await.unwrap();
    assert!(raw.list_children(&dir).await.unwrap_or_default().is_empty());

    let leader = locker
        .election("elect")
        .unwrap()
        .campaign("id-1")
        .await
        .unwrap();
    let dir = format!("{base}/elect");
    let nodes = raw.list_children(&dir).await.unwrap();
    assert!(
        nodes.len() == 1 && is_curator_node(&nodes[0], "latch-"),
        "{nodes:?}"
    );
    let (data, _) = raw.get_data(&format!("{dir}/{}", nodes[0])).await.unwrap();
    assert_eq!(data, b"id-1");
    leader.resign().await.unwrap();
}

/// Read and write locks are InterProcessReadWriteLock nodes in one queue.
#[tokio::test]
async fn read_and_write_locks_create_curator_nodes() {
    let (locker, raw, base) = locker("rw").await;
    let rw = locker.rwlock("cfg").unwrap();
    let reader = rw.read().await.unwrap();
    let writing = {
        let rw = locker.rwlock("cfg").unwrap();
        tokio::spawn(async move { rw.write().await })
    };
    let dir = format!("{base}/cfg");
    let nodes = children_when(&raw, &dir, |c| c.len() == 2).await;
    assert!(
        nodes.iter().any(|n| is_curator_node(n, "__READ__")),
        "{nodes:?}"
    );
    assert!(
        nodes.iter().any(|n| is_curator_node(n, "__WRIT__")),
        "{nodes:?}"
    );
    let read_token = reader.token();
    reader.release().await.unwrap();
    let writer = tokio::time::timeout(SLACK, writing)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(writer.token() > read_token);
    writer.release().await.unwrap();
}

/// A permit is an InterProcessSemaphoreV2 lease, and the mutex that
/// serializes acquires is released once it is in.
#[tokio::test]
async fn permits_create_curator_leases() {
    let (locker, raw, base) = locker("pool").await;
    let pool = locker.semaphore("pool", 2).unwrap();
    let permit = pool
        .acquire_with(LockOptions::new().value("p1"))
        .await
        .unwrap();
    let leases = raw
        .list_children(&format!("{base}/pool/leases"))
        .await
        .unwrap();
    assert!(
        leases.len() == 1 && is_curator_node(&leases[0], "lease-"),
        "{leases:?}"
    );
    let lease = format!("{base}/pool/leases/{}", leases[0]);
    let (data, stat) = raw.get_data(&lease).await.unwrap();
    assert_eq!(
        (data.as_slice(), stat.czxid as u64),
        (&b"p1"[..], permit.token().get())
    );
    let mutex = raw
        .list_children(&format!("{base}/pool/locks"))
        .await
        .unwrap_or_default();
    assert!(mutex.is_empty(), "{mutex:?}");
    permit.release().await.unwrap();
    assert!(raw.check_stat(&lease).await.unwrap().is_none());
}

/// Creates a Curator InterProcessMutex-style node by hand at `dir`.
async fn curator_node(raw: &Client, dir: &str, marker: &str, data: &[u8]) -> (String, i64) {
    let parents = CreateMode::Container.with_acls(Acls::anyone_all());
    raw.mkdir(dir, &parents).await.unwrap();
    let node = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let prefix = format!("{dir}/_c_{}-{marker}", uuid::Uuid::new_v4());
    let (stat, sequence) = raw.create(&prefix, data, &node).await.unwrap();
    (format!("{prefix}{sequence}"), stat.czxid)
}

/// A node a Curator client would create holds the lock: distlock reports
/// it as the holder (its name as owner, its data as value), waits behind
/// it, and gets in once it is deleted, with a higher token.
#[tokio::test]
async fn a_curator_node_holds_the_lock_against_distlock() {
    let (locker, raw, base) = locker("peer").await;
    let dir = format!("{base}/jobs");
    let (node, czxid) = curator_node(&raw, &dir, "lock-", b"127.0.0.1").await;
    let holder = locker
        .inspect("jobs")
        .await
        .unwrap()
        .expect("the hand-made node holds");
    assert_eq!(holder.owner, node.rsplit('/').next().unwrap());
    assert_eq!(
        (holder.value.as_str(), holder.token.get()),
        ("127.0.0.1", czxid as u64)
    );
    assert!(locker.try_lock("jobs").await.unwrap().is_none());
    let waiting = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.lock("jobs").await })
    };
    children_when(&raw, &dir, |c| c.len() == 2).await;
    assert!(
        !waiting.is_finished(),
        "distlock took the lock beside a Curator holder"
    );
    raw.delete(&node, None).await.unwrap();
    let guard = common::taken(waiting, "the distlock waiter", SLACK).await;
    assert!(guard.token().get() > czxid as u64);
    guard.release().await.unwrap();
}

/// A path that another recipe's nodes use is refused, naming both
/// recipes, and our node is withdrawn; a plain lock where read-write lock
/// nodes queue joins them as a writer.
#[tokio::test]
async fn a_recipe_mix_is_refused_naming_both() {
    let (locker, raw, base) = locker("mix").await;
    let dir = format!("{base}/m");
    let (latch, _) = curator_node(&raw, &dir, "latch-", b"").await;
    match locker.try_lock("m").await {
        Err(LockError::InvalidConfig { reason }) => {
            assert!(reason.contains("LeaderLatch"), "{reason}");
            assert!(reason.contains("InterProcessMutex"), "{reason}");
        }
        other => panic!("a lock where a LeaderLatch runs gave {other:?}"),
    }
    let left = children_when(&raw, &dir, |c| c.len() == 1).await;
    assert_eq!(left, [latch.rsplit('/').next().unwrap()]);
    let refused = locker.semaphore("m", 3).unwrap().try_acquire().await;
    assert!(
        matches!(refused, Err(LockError::InvalidConfig { .. })),
        "{refused:?}"
    );

    let dir = format!("{base}/rw");
    let (reader, _) = curator_node(&raw, &dir, "__READ__", b"").await;
    assert!(
        locker.try_lock("rw").await.unwrap().is_none(),
        "a lock beside a reader"
    );
    let waiting = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.lock("rw").await })
    };
    let nodes = children_when(&raw, &dir, |c| c.len() == 2).await;
    assert!(
        nodes.iter().any(|n| is_curator_node(n, "__WRIT__")),
        "the lock did not queue as a writer: {nodes:?}"
    );
    raw.delete(&reader, None).await.unwrap();
    let guard = common::taken(waiting, "the lock behind a Curator reader", SLACK).await;
    guard.release().await.unwrap();
}
