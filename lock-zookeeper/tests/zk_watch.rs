//! Holder values and watches on a real server, seen from inside and from
//! outside distlock: what a contender node stores, a value change that
//! must wake none of the waiters behind the holder, and watches that
//! follow holders and values in order, see a lock taken away, and remove
//! their server watches when dropped.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{connect, taken};
use distlock_testkit::layout::{zk_contenders, zk_lock_dir};
use distlock_testkit::states::brief;
use distlock_testkit::zookeeper::{raw_client, shared_standalone, watchers_of, zk_url};
use distlock_testkit::{assert_lost, eventually, next_state};
use lock_core::{HolderWatch, LockError, LockGuard, LockInfo, LockOptions, Locker};
use tokio::task::JoinHandle;
use zookeeper_client::Client;

/// The base path the lockers of these tests use.
const BASE: &str = "/watch";
/// Generous bound for what should be quick, on a busy 2-core machine.
const PATIENCE: Duration = Duration::from_secs(10);

/// The shared standalone server of this binary, and a raw session on it.
struct Zk {
    addr: SocketAddr,
    raw: Client,
}

async fn zk() -> Zk {
    let addrs = shared_standalone().await.unwrap_or_else(|e| panic!("{e}"));
    let raw = raw_client(&addrs).await.unwrap();
    Zk {
        addr: addrs[0],
        raw,
    }
}

impl Zk {
    /// `count` lockers in namespace `namespace`, each with its own session.
    async fn lockers(&self, namespace: &str, count: usize) -> Vec<Locker> {
        let url = zk_url(
            &[self.addr],
            BASE,
            &format!("namespace={namespace}&ttl=10s"),
        );
        let mut lockers = Vec::new();
        for _ in 0..count {
            lockers.push(connect(&url).await.unwrap());
        }
        lockers
    }

    /// The contenders directory of `key` in `locker`'s namespace.
    fn dir(&self, locker: &Locker, key: &str) -> String {
        zk_lock_dir(BASE, &locker.name(key).unwrap())
    }

    /// The contender nodes of `dir` (full paths), in queue order.
    async fn contenders(&self, dir: &str) -> Vec<String> {
        let children = self.raw.list_children(dir).await.unwrap_or_default();
        zk_contenders(&children)
            .into_iter()
            .map(|name| format!("{dir}/{name}"))
            .collect()
    }

    /// Waits until `dir` holds `count` contenders; returns them in order.
    async fn queued(&self, dir: &str, count: usize) -> Vec<String> {
        let what = format!("{count} contenders in {dir}");
        eventually(PATIENCE, &what, || async {
            let nodes = self.contenders(dir).await;
            (nodes.len() == count).then_some(nodes)
        })
        .await
        .unwrap()
    }

    /// The data of node `path`.
    async fn data(&self, path: &str) -> Vec<u8> {
        self.raw.get_data(path).await.unwrap().0
    }

    /// Waits until exactly `count` sessions watch the data of `path`.
    async fn watched_by(&self, path: &str, count: usize) {
        let what = format!("{count} sessions watching {path}");
        eventually(PATIENCE, &what, || async {
            let watchers = watchers_of(self.addr, path).await?;
            match watchers == count {
                true => Ok(()),
                false => Err(format!("{watchers} watch it")),
            }
        })
        .await
        .unwrap();
    }
}

/// The next state `watch` reports, within [`PATIENCE`].
async fn next(watch: &mut HolderWatch) -> Option<LockInfo> {
    next_state(watch, PATIENCE).await
}

/// `locker` waiting for `key` in a task of its own, storing `value`.
fn spawn_lock(locker: &Locker, key: &str, value: &str) -> JoinHandle<Result<LockGuard, LockError>> {
    let (locker, key) = (locker.clone(), key.to_owned());
    let options = LockOptions::new()
        .value(value)
        .wait(Duration::from_secs(60));
    tokio::spawn(async move { locker.lock_with(&key, options).await })
}

/// The holder's node stores the owner id alone when there is no value
/// (byte for byte what it stored before values existed), else the owner
/// id, a newline and the value; `set_value` rewrites it, and fails with
/// `Lost`, writing nothing, once the node is gone.
#[tokio::test]
async fn the_holder_node_stores_the_owner_and_the_value() {
    let zk = zk().await;
    let [a, b] = <[Locker; 2]>::try_from(zk.lockers("zk-values", 2).await).unwrap();
    let dir = zk.dir(&a, "k");

    let guard = a.lock("k").await.unwrap();
    let node = zk.queued(&dir, 1).await.remove(0);
    let owner = guard.owner().as_str().to_owned();
    assert_eq!(zk.data(&node).await, owner.as_bytes());
    guard.set_value("one\ntwo").await.unwrap();
    assert_eq!(
        zk.data(&node).await,
        format!("{owner}\none\ntwo").as_bytes()
    );
    let seen = b.inspect("k").await.unwrap().unwrap();
    assert_eq!(
        (seen.owner.as_str(), seen.value.as_str()),
        (owner.as_str(), "one\ntwo")
    );
    guard.set_value("").await.unwrap();
    assert_eq!(zk.data(&node).await, owner.as_bytes());
    guard.release().await.unwrap();

    let guard = a
        .lock_with("k", LockOptions::new().value("10.0.0.7:8080"))
        .await
        .unwrap();
    let node = zk.queued(&dir, 1).await.remove(0);
    let owner = guard.owner().as_str();
    assert_eq!(
        zk.data(&node).await,
        format!("{owner}\n10.0.0.7:8080").as_bytes()
    );

    zk.raw.delete(&node, None).await.unwrap();
    assert_lost(guard.set_value("too late").await);
    assert!(
        zk.contenders(&dir).await.is_empty(),
        "set_value created a node"
    );
    assert!(b.inspect("k").await.unwrap().is_none());
}

/// Only a holder writes its node, and a waiter that sees its predecessor's
/// data change knows that the predecessor held the lock. A value change is
/// such a write, but not a release: neither the waiter at the head of the
/// queue (a holds, b waits for a's node to go) nor one further back (b
/// holds, c watches b's node for a release's mark) may take the lock when
/// the holder replaces its value.
#[tokio::test]
async fn a_value_change_wakes_none_of_the_waiters() {
    let zk = zk().await;
    let [a, b, c] = <[Locker; 3]>::try_from(zk.lockers("zk-value-waiters", 3).await).unwrap();
    let dir = zk.dir(&a, "k");

    let held_by_a = a.lock("k").await.unwrap();
    let b_waits = spawn_lock(&b, "k", "b");
    zk.queued(&dir, 2).await;
    let c_waits = spawn_lock(&c, "k", "c");
    let nodes = zk.queued(&dir, 3).await;
    // b watches its own node, and c b's node for a mark: two sessions.
    zk.watched_by(&nodes[1], 2).await;
    // b's watch on a's node shows in no server report: write a's node
    // often enough that b has watched it for most of the writes.
    for round in 0..10 {
        held_by_a.set_value(format!("a-{round}")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !b_waits.is_finished(),
        "b took the lock on a's value change"
    );
    assert!(
        !c_waits.is_finished(),
        "c took the lock on a's value change"
    );

    held_by_a.release().await.unwrap();
    let held_by_b = taken(b_waits, "b", PATIENCE).await;
    zk.watched_by(&nodes[1], 2).await;
    held_by_b.set_value("b, changed").await.unwrap();
    // c's watch on b's data fired (b has watched its own node again).
    zk.watched_by(&nodes[1], 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !c_waits.is_finished(),
        "c took the lock on b's value change"
    );
    let seen = a.inspect("k").await.unwrap();
    assert_eq!(brief(seen), Some((held_by_b.token(), "b, changed".into())));

    // b's release still hands the lock to c at once.
    held_by_b.release().await.unwrap();
    let held_by_c = taken(c_waits, "c", PATIENCE).await;
    assert_eq!(held_by_c.value(), "c");
    held_by_c.release().await.unwrap();
}

/// A watch reports the current holder, then each holder of a run of
/// waiters in queue order with its value and each value change, then the
/// lock free; waiters joining behind the holder report nothing.
#[tokio::test]
async fn a_watch_follows_holders_and_values_in_order() {
    let zk = zk().await;
    let lockers = zk.lockers("zk-watch-order", 4).await;
    let (observer, holders) = lockers.split_first().unwrap();
    let dir = zk.dir(observer, "k");
    let mut watch = observer.watch("k").unwrap();
    assert!(next(&mut watch).await.is_none());

    let first = holders[0]
        .lock_with("k", LockOptions::new().value("h0"))
        .await
        .unwrap();
    let seen = next(&mut watch).await.expect("the first holder");
    assert_eq!((seen.token, seen.value.as_str()), (first.token(), "h0"));
    assert_eq!(seen.owner, first.owner().as_str());
    let mut waiting = Vec::new();
    for (i, holder) in holders.iter().enumerate().skip(1) {
        waiting.push(spawn_lock(holder, "k", &format!("h{i}")));
        zk.queued(&dir, i + 1).await;
    }
    first.set_value("h0, changed").await.unwrap();
    let seen = next(&mut watch).await.expect("a value change");
    assert_eq!(
        (seen.token, seen.value.as_str()),
        (first.token(), "h0, changed")
    );

    let mut last = first.token();
    first.release().await.unwrap();
    for (i, waiting) in waiting.into_iter().enumerate() {
        let guard = taken(waiting, "a waiter", PATIENCE).await;
        let seen = next(&mut watch).await.expect("the next holder");
        assert!(seen.token > last, "token {} after {last}", seen.token);
        assert_eq!(
            (seen.token, seen.value.clone()),
            (guard.token(), format!("h{}", i + 1))
        );
        guard.set_value("changed").await.unwrap();
        let seen = next(&mut watch).await.expect("a value change");
        assert_eq!(
            (seen.token, seen.value.as_str()),
            (guard.token(), "changed")
        );
        last = guard.token();
        guard.release().await.unwrap();
    }
    assert!(next(&mut watch).await.is_none(), "the last release");
}

/// A watch of a key never used (no directory yet) reports it free, then
/// its first holder; a lock taken away from outside is reported free.
#[tokio::test]
async fn a_watch_sees_a_new_directory_and_a_lock_taken_away() {
    let zk = zk().await;
    let [a, observer] = <[Locker; 2]>::try_from(zk.lockers("zk-watch-taken", 2).await).unwrap();
    let key = format!("fresh-{}", fastrand::u64(..));
    let mut watch = observer.watch(&key).unwrap();
    assert!(next(&mut watch).await.is_none());
    let guard = a.lock(&key).await.unwrap();
    assert_eq!(next(&mut watch).await.map(|h| h.token), Some(guard.token()));
    assert!(observer.force_release(&key).await.unwrap());
    assert!(next(&mut watch).await.is_none(), "the lock taken away");
    tokio::time::timeout(PATIENCE, guard.lost()).await.unwrap();
    let again = a.lock(&key).await.unwrap();
    let seen = next(&mut watch).await.expect("the next holder");
    assert!(seen.token > guard.token());
    assert_eq!(seen.token, again.token());
    again.release().await.unwrap();
}

/// Dropping a watch removes the watch it set on the server: on the
/// holder's node while the lock is held, on the missing directory of a
/// key never used. (Watches on a directory's children appear in no server
/// report.)
#[tokio::test]
async fn dropping_a_watch_removes_its_server_watches() {
    let zk = zk().await;
    let [a, observer] = <[Locker; 2]>::try_from(zk.lockers("zk-watch-drop", 2).await).unwrap();
    let guard = a.lock("k").await.unwrap();
    let node = zk.queued(&zk.dir(&a, "k"), 1).await.remove(0);
    // The holder watches its own node once it has held it a moment.
    zk.watched_by(&node, 1).await;
    let mut watch = observer.watch("k").unwrap();
    assert_eq!(next(&mut watch).await.map(|h| h.token), Some(guard.token()));
    zk.watched_by(&node, 2).await;
    drop(watch);
    zk.watched_by(&node, 1).await;

    let key = format!("fresh-{}", fastrand::u64(..));
    let dir = zk.dir(&a, &key);
    let mut watch = observer.watch(&key).unwrap();
    assert!(next(&mut watch).await.is_none());
    zk.watched_by(&dir, 1).await;
    drop(watch);
    zk.watched_by(&dir, 0).await;
    guard.release().await.unwrap();
}
