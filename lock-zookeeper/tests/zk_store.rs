//! ZooKeeper behaviour beyond the conformance suite, on a standalone
//! server shared by the tests of this binary: the flags the store
//! declares, a lock removed from outside, how an acquire enters the queue
//! and what its token is, and how a lock passes down the queue. Lock nodes
//! are looked at with a raw session, where the testkit's `layout` says
//! they are.

mod common;

use std::net::SocketAddr;

use common::connect;
use distlock_testkit::layout::zk_lock_dir;
use distlock_testkit::with_query;
use distlock_testkit::zookeeper::{
    delete_holder, raw_client, shared_standalone, watchers_of, zk_url,
};
use lock_core::backend::Capabilities;
use lock_core::backend::Capability::Remote;
use lock_core::Locker;

/// The base path the lockers of these tests use.
const BASE: &str = "/store";

/// The shared standalone server of this binary, seen from outside
/// distlock.
struct SharedZk {
    addrs: Vec<SocketAddr>,
}

async fn shared_zk() -> SharedZk {
    let addrs = shared_standalone().await.unwrap_or_else(|e| panic!("{e}"));
    SharedZk { addrs }
}

impl SharedZk {
    /// The lock URL lockers are opened on (add ttl and namespace).
    fn url(&self) -> String {
        zk_url(&self.addrs, BASE, "")
    }

    /// The lock URL with keys in `namespace` and sessions of `ttl`.
    fn url_in(&self, namespace: &str, ttl: &str) -> String {
        with_query(&self.url(), &format!("namespace={namespace}&ttl={ttl}"))
    }

    /// A locker on [`Self::url_in`].
    async fn locker(&self, namespace: &str, ttl: &str) -> Locker {
        connect(&self.url_in(namespace, ttl)).await.unwrap()
    }

    /// A plain session (no chroot, no auth), as an operator would use.
    async fn raw_client(&self) -> zookeeper_client::Client {
        raw_client(&self.addrs).await.unwrap()
    }

    /// The contenders directory of `key` in `locker`'s namespace.
    fn lock_dir(&self, locker: &Locker, key: &str) -> String {
        zk_lock_dir(BASE, &locker.name(key).unwrap())
    }

    /// How many sessions watch node `path`, as the first server reports.
    async fn watchers_of(&self, path: &str) -> Result<usize, String> {
        watchers_of(self.addrs[0], path).await
    }

    /// Deletes the node holding `key` in `locker`'s namespace.
    async fn delete_holder(&self, locker: &Locker, key: &str) -> Result<(), String> {
        let name = locker.name(key).unwrap();
        delete_holder(&self.raw_client().await, BASE, &name).await
    }
}

/// Locks live as long as their session (no per-lock lease), so the cases
/// needing per-lock expiry report themselves not applicable; everything
/// else is declared but `watch_every_change` (a watch reads again on each
/// one-shot notification, so quick changes may be merged). This pins the
/// flags so none flips unnoticed.
#[tokio::test]
async fn zookeeper_declares_its_capabilities() {
    let locker = connect("zk://127.0.0.1:1/x").await.unwrap();
    let expected = Capabilities::QUEUEING_STORE.with(&[Remote]);
    assert_eq!(locker.capabilities(), expected);
    assert_eq!(locker.backend_name(), "zookeeper");
}

/// A lock taken at once watches its own node only after a delay (a short
/// hold then costs the server no watch). A removal from outside is
/// reported all the same: right after the acquisition, before the watch
/// is set, and later, through the watch.
#[tokio::test]
async fn a_lock_removed_from_outside_is_reported_lost_before_and_after_its_watch_is_set() {
    use lock_core::LossReason;
    use std::time::Duration;

    let zk = shared_zk().await;
    let locker = zk.locker("zk-own-watch", "10s").await;
    for held_for in [Duration::ZERO, Duration::from_millis(400)] {
        let guard = locker.lock("k").await.unwrap();
        tokio::time::sleep(held_for).await;
        assert!(
            guard.is_held(),
            "lost after {held_for:?} with nobody touching it"
        );
        zk.delete_holder(&locker, "k").await.unwrap();
        let reason = tokio::time::timeout(Duration::from_secs(10), guard.lost())
            .await
            .unwrap_or_else(|_| panic!("a removal after {held_for:?} was not reported"));
        assert_eq!(reason, LossReason::TakenAway);
        assert!(!guard.is_held());
        assert!(
            matches!(
                guard.release().await,
                Err(lock_core::LockError::Lost { .. })
            ),
            "a release of a removed lock must report Lost"
        );
        // The lock is free for others, and the locker still works.
        locker.lock("k").await.unwrap().release().await.unwrap();
    }
}

/// Purging a namespace removes its whole subtree — nested keys, read
/// locks, semaphores with their stored limits, the namespace's own node —
/// while locks are held in it (their holders are told), and leaves
/// another namespace's nodes in place.
#[tokio::test]
async fn purging_a_namespace_removes_its_subtree_and_nothing_else() {
    use std::time::Duration;

    let zk = shared_zk().await;
    let purged = zk.locker("zk-purged", "10s").await;
    let kept = zk.locker("zk-kept", "10s").await;
    let mut guards = Vec::new();
    for key in ["a", "a/b/c", "x y/z"] {
        guards.push(purged.lock(key).await.unwrap());
    }
    guards.push(purged.rwlock("shared").unwrap().read().await.unwrap());
    guards.push(
        purged
            .semaphore("pool", 2)
            .unwrap()
            .acquire()
            .await
            .unwrap(),
    );
    let kept_guard = kept.lock("a").await.unwrap();
    let raw = zk.raw_client().await;

    purged.purge_namespace().await.unwrap();

    let namespace_node = format!("{BASE}/zk-purged");
    assert_eq!(
        raw.check_stat(&namespace_node).await.unwrap(),
        None,
        "{namespace_node} is still there"
    );
    for guard in &guards {
        tokio::time::timeout(Duration::from_secs(10), guard.lost())
            .await
            .unwrap_or_else(|_| panic!("{} was never reported lost", guard.key()));
    }
    assert!(kept_guard.is_held());
    let kept_dir = zk.lock_dir(&kept, "a");
    assert_eq!(raw.list_children(&kept_dir).await.unwrap().len(), 1);
    kept_guard.release().await.unwrap();
    // Purging a namespace that holds nothing succeeds.
    purged.purge_namespace().await.unwrap();
}

/// How an acquire entered the queue, and what its token is, as the server
/// sees it.
mod entry {
    use super::{shared_zk, SharedZk};
    use distlock_testkit::eventually;
    use distlock_testkit::layout::zk_contenders;
    use lock_core::{LockGuard, Locker};
    use std::time::Duration;
    use zookeeper_client::{Acl, AuthId, Client, Permission};

    /// The data version of the contenders directory: the transaction that
    /// enters a likely-free lock writes to it, a pipelined create does not.
    async fn dir_version(raw: &Client, dir: &str) -> i32 {
        raw.check_stat(dir)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{dir} is missing"))
            .version
    }

    /// Asserts that `guard`'s token is the czxid of the node at the head
    /// of `dir`, i.e. of the lock's node.
    async fn assert_token_is_czxid(raw: &Client, dir: &str, guard: &LockGuard) {
        let children = raw.list_children(dir).await.unwrap();
        let head = *zk_contenders(&children).first().expect("a holder node");
        let stat = raw
            .check_stat(&format!("{dir}/{head}"))
            .await
            .unwrap()
            .expect("the holder node");
        assert_eq!(guard.token().get(), stat.czxid.unsigned_abs());
    }

    async fn open(zk: &SharedZk, namespace: &str) -> Locker {
        zk.locker(namespace, "10s").await
    }

    /// A locker in `namespace`, a raw session, and the contenders
    /// directory of key `k`, which exists: the lock was taken and
    /// released once.
    async fn used_once(namespace: &str) -> (Locker, Client, String) {
        let zk = shared_zk().await;
        let locker = open(&zk, namespace).await;
        let raw = zk.raw_client().await;
        let dir = zk.lock_dir(&locker, "k");
        locker.lock("k").await.unwrap().release().await.unwrap();
        (locker, raw, dir)
    }

    /// A free lock is entered by the transaction that counts the
    /// directory's children; where the session last waited, by a create
    /// with a pipelined listing; either way the token is the node's czxid.
    #[tokio::test]
    async fn a_free_lock_is_taken_in_one_transaction_and_a_busy_one_with_a_listing() {
        let zk = shared_zk().await;
        let (a, b) = (open(&zk, "zk-entry").await, open(&zk, "zk-entry").await);
        let raw = zk.raw_client().await;
        let dir = zk.lock_dir(&a, "k");

        let guard = a.lock("k").await.unwrap();
        assert_token_is_czxid(&raw, &dir, &guard).await;
        let version = dir_version(&raw, &dir).await;
        guard.release().await.unwrap();
        let guard = a.lock("k").await.unwrap();
        assert_token_is_czxid(&raw, &dir, &guard).await;
        assert_eq!(dir_version(&raw, &dir).await, version + 1, "free lock");

        // b has never waited here: it enters by the transaction, finds a
        // ahead of it, and waits.
        let waiter = tokio::spawn({
            let b = b.clone();
            async move { b.lock("k").await }
        });
        eventually(
            Duration::from_secs(10),
            "the waiter's transaction",
            || async { dir_version(&raw, &dir).await == version + 2 },
        )
        .await
        .unwrap();
        guard.release().await.unwrap();
        let guard = waiter.await.unwrap().unwrap();
        assert_token_is_czxid(&raw, &dir, &guard).await;
        guard.release().await.unwrap();

        // b last waited here: it enters with a pipelined listing, which
        // leaves the directory's data alone.
        let guard = b.lock("k").await.unwrap();
        assert_token_is_czxid(&raw, &dir, &guard).await;
        assert_eq!(dir_version(&raw, &dir).await, version + 2, "after a wait");
        guard.release().await.unwrap();
        // That acquisition found the lock free: back to the transaction.
        let guard = b.lock("k").await.unwrap();
        assert_token_is_czxid(&raw, &dir, &guard).await;
        assert_eq!(dir_version(&raw, &dir).await, version + 3, "free again");
        guard.release().await.unwrap();
    }

    /// A node in the contenders directory that is not a contender (put
    /// there by hand) makes the transaction count two children; the
    /// acquire then lists the directory, ignores the stranger, and holds.
    #[tokio::test]
    async fn a_stranger_in_the_directory_does_not_block_a_free_lock() {
        let (locker, raw, dir) = used_once("zk-entry-stranger").await;
        let options = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all());
        raw.create(&format!("{dir}/notes"), b"", &options)
            .await
            .unwrap();
        for _ in 0..2 {
            let guard = tokio::time::timeout(Duration::from_secs(10), locker.lock("k"))
                .await
                .expect("a free lock with a stranger in its directory")
                .unwrap();
            assert_token_is_czxid(&raw, &dir, &guard).await;
            guard.release().await.unwrap();
        }
        raw.delete(&format!("{dir}/notes"), None).await.unwrap();
    }

    /// A contenders directory that lets us create and delete nodes but not
    /// write to it (an operator's ACL) still works: the acquire enters with
    /// a plain create instead of the transaction.
    #[tokio::test]
    async fn a_directory_that_refuses_writes_is_entered_with_a_plain_create() {
        let (locker, raw, dir) = used_once("zk-entry-acl").await;
        let no_write = [Acl::new(
            Permission::READ | Permission::CREATE | Permission::DELETE,
            AuthId::anyone(),
        )];
        raw.set_acl(&dir, &no_write, None).await.unwrap();
        let version = dir_version(&raw, &dir).await;
        for _ in 0..2 {
            let guard = locker.lock("k").await.unwrap();
            assert_token_is_czxid(&raw, &dir, &guard).await;
            guard.release().await.unwrap();
        }
        assert_eq!(dir_version(&raw, &dir).await, version);
    }
}

/// How a lock passes down a queue: a holder that had to wait marks its
/// node as it deletes it, and the waiter behind it takes the lock on that
/// mark alone, with no listing in between (see lock-zookeeper's `ahead`).
mod handoff {
    use super::{connect, shared_zk};
    use crate::common::taken;
    use distlock_testkit::eventually;
    use distlock_testkit::layout::zk_contenders;
    use std::time::Duration;
    use zookeeper_client::{Acl, Acls, AuthId, Client, Permission};

    const PATIENCE: Duration = Duration::from_secs(10);

    async fn children(raw: &Client, dir: &str) -> Vec<String> {
        raw.list_children(dir).await.unwrap_or_default()
    }

    /// Waits until `dir` holds `count` contenders; returns their names in
    /// queue order.
    async fn queued(raw: &Client, dir: &str, count: usize) -> Vec<String> {
        let what = format!("{count} contenders in {dir}");
        eventually(PATIENCE, &what, || async {
            let children = children(raw, dir).await;
            let names: Vec<String> = zk_contenders(&children)
                .into_iter()
                .map(str::to_owned)
                .collect();
            (names.len() == count).then_some(names)
        })
        .await
        .unwrap()
    }

    /// a holds, b waits behind it, c behind b. Once c watches b's node,
    /// the directory stops letting anyone list it: a listing by c would
    /// now fail. a releases, b takes the lock and releases it, marked, and
    /// c must take the lock without listing.
    #[tokio::test]
    async fn the_waiter_behind_a_released_holder_takes_the_lock_without_listing() {
        let zk = shared_zk().await;
        let url = zk.url_in("zk-handoff", "10s");
        let (a, b, c) = (
            connect(&url).await.unwrap(),
            connect(&url).await.unwrap(),
            connect(&url).await.unwrap(),
        );
        let raw = zk.raw_client().await;
        let dir = zk.lock_dir(&a, "k");

        let held_by_a = a.lock("k").await.unwrap();
        let b_waits = tokio::spawn(async move { b.lock("k").await });
        queued(&raw, &dir, 2).await;
        let c_waits = tokio::spawn(async move { c.lock("k").await });
        let names = queued(&raw, &dir, 3).await;
        let b_node = format!("{dir}/{}", names[1]);
        eventually(PATIENCE, "c to watch b's node", || async {
            let watchers = zk.watchers_of(&b_node).await?;
            // b watches its own node; c, its predecessor's.
            match watchers {
                2.. => Ok(()),
                _ => Err(format!("{watchers} sessions watch it")),
            }
        })
        .await
        .unwrap();

        let no_listing = [Acl::new(
            Permission::CREATE | Permission::DELETE | Permission::WRITE | Permission::ADMIN,
            AuthId::anyone(),
        )];
        raw.set_acl(&dir, &no_listing, None).await.unwrap();
        held_by_a.release().await.unwrap();
        // b's predecessor was the holder: b takes the lock without listing.
        let held_by_b = taken(b_waits, "b", PATIENCE).await;
        held_by_b.release().await.unwrap();
        // c takes it on b's marked release, without listing.
        let held_by_c = taken(c_waits, "c", PATIENCE).await;
        assert!(held_by_c.is_held());
        raw.set_acl(&dir, Acls::anyone_all().as_ref(), None)
            .await
            .unwrap();
        held_by_c.release().await.unwrap();
    }

    /// A holder that had to wait releases with a marked delete; if an
    /// operator took WRITE away from its node meanwhile, the release still
    /// deletes the node, unmarked, and the lock is free.
    #[tokio::test]
    async fn a_node_that_refuses_the_mark_is_still_released() {
        let zk = shared_zk().await;
        let url = zk.url_in("zk-handoff-acl", "10s");
        let (a, b) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
        let raw = zk.raw_client().await;
        let dir = zk.lock_dir(&a, "k");

        let held_by_a = a.lock("k").await.unwrap();
        let b_waits = tokio::spawn(async move { b.lock("k").await });
        queued(&raw, &dir, 2).await;
        held_by_a.release().await.unwrap();
        let held_by_b = taken(b_waits, "b", PATIENCE).await;
        let names = queued(&raw, &dir, 1).await;
        let read_only = [Acl::new(Permission::READ, AuthId::anyone())];
        raw.set_acl(&format!("{dir}/{}", names[0]), &read_only, None)
            .await
            .unwrap();
        held_by_b.release().await.unwrap();
        assert!(children(&raw, &dir).await.is_empty(), "b's node is gone");
        let again = tokio::time::timeout(PATIENCE, a.try_lock("k"))
            .await
            .expect("a try_lock answers")
            .unwrap();
        assert!(again.is_some(), "the lock is free again");
    }
}

/// A process frozen past its session timeout runs again before its timers
/// and before the client library notices anything: the guard must say
/// "lost" at once, since the server may have expired the session and
/// given the lock on.
#[tokio::test]
async fn a_guard_frozen_past_its_session_timeout_says_lost_before_any_timer_runs() {
    let zk = shared_zk().await;
    let locker = zk.locker("frozen-past-session", "2s").await;
    let guard = locker.lock("k").await.unwrap();
    assert!(guard.is_held());
    // Blocks the only runtime thread, as SIGSTOP would the process.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(
        !guard.is_held(),
        "a guard whose session may have expired while frozen still says held"
    );
}
