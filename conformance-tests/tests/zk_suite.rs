//! The conformance suite against ZooKeeper, opened by URL through the
//! `distlock` facade: on a standalone server shared by the cases, and on a
//! 3-server ensemble (one per test binary, started on first use).

use conformance_tests::zookeeper::{shared_standalone, Ensemble, ZkFactory};
use distlock::Capabilities;
use tokio::sync::OnceCell;

async fn zk_factory() -> ZkFactory {
    let addrs = shared_standalone().await.unwrap_or_else(|e| panic!("{e}"));
    ZkFactory::new(addrs, "/suite", "")
}

async fn ensemble_factory() -> ZkFactory {
    static ENSEMBLE: OnceCell<Result<Ensemble, String>> = OnceCell::const_new();
    let ensemble = ENSEMBLE.get_or_init(|| Ensemble::start(3)).await;
    let ensemble = ensemble.as_ref().unwrap_or_else(|e| panic!("{e}"));
    ZkFactory::new(ensemble.client_addrs(), "/suite-ensemble", "")
}

lock_core::conformance_tests!(zookeeper, zk_factory);
lock_core::conformance_tests!(zookeeper_ensemble, ensemble_factory);

/// Locks live as long as their session (no per-lock lease), so the cases
/// needing per-lock expiry report themselves not applicable; everything
/// else is declared. This pins the flags so none flips unnoticed.
#[tokio::test]
async fn zookeeper_declares_its_capabilities() {
    let locker = distlock::connect("zk://127.0.0.1:1/x").await.unwrap();
    let mut expected = Capabilities::default();
    expected.expiry = true;
    expected.force_release = true;
    expected.notified_wakeups = true;
    expected.fifo = true;
    expected.remote = true;
    assert_eq!(locker.capabilities(), expected);
    assert_eq!(locker.backend_name(), "zookeeper");
}

/// Waiters that give up in the middle of the queue: the others are served
/// one at a time, in queue order (see `conformance_tests::queue`).
mod queue_order {
    use conformance_tests::queue::{check_queue, Shape, QUEUE_KEY};
    use conformance_tests::zookeeper::{shared_standalone, zk_url};
    use distlock::lock_zookeeper::names::lock_dir;
    use distlock::Locker;

    const BASE: &str = "/queue";

    async fn check(namespace: &str, shape: Shape) {
        let addrs = shared_standalone().await.unwrap_or_else(|e| panic!("{e}"));
        let url = zk_url(&addrs, BASE, &format!("ttl=10s&namespace={namespace}"));
        let hosts: Vec<String> = addrs.iter().map(ToString::to_string).collect();
        let raw = zookeeper_client::Client::connect(&hosts.join(","))
            .await
            .unwrap();
        let open = || async { distlock::connect(&url).await.unwrap() };
        let queued = |holder: Locker| {
            let raw = raw.clone();
            async move {
                let dir = lock_dir(BASE, &holder.name(QUEUE_KEY).unwrap());
                match raw.list_children(&dir).await {
                    Ok(children) => children,
                    Err(zookeeper_client::Error::NoNode) => Vec::new(),
                    Err(e) => panic!("list {dir}: {e}"),
                }
            }
        };
        check_queue(open, queued, shape).await;
    }

    conformance_tests::queue_order_tests!("zkq", check);
}

/// A lock taken at once watches its own node only after a delay (a short
/// hold then costs the server no watch). A removal from outside is
/// reported all the same: right after the acquisition, before the watch
/// is set, and later, through the watch.
#[tokio::test]
async fn a_lock_removed_from_outside_is_reported_lost_before_and_after_its_watch_is_set() {
    use distlock::LossReason;
    use std::time::Duration;

    let factory = zk_factory().await;
    let url = conformance_tests::with_query(&factory.url(), "namespace=zk-own-watch&ttl=10s");
    let locker = distlock::connect(&url).await.unwrap();
    for held_for in [Duration::ZERO, Duration::from_millis(400)] {
        let guard = locker.lock("k").await.unwrap();
        tokio::time::sleep(held_for).await;
        assert!(
            guard.is_held(),
            "lost after {held_for:?} with nobody touching it"
        );
        factory.delete_holder(&locker, "k").await.unwrap();
        let reason = tokio::time::timeout(Duration::from_secs(10), guard.lost())
            .await
            .unwrap_or_else(|_| panic!("a removal after {held_for:?} was not reported"));
        assert_eq!(reason, LossReason::TakenAway);
        assert!(!guard.is_held());
        assert!(
            matches!(guard.release().await, Err(distlock::LockError::Lost { .. })),
            "a release of a removed lock must report Lost"
        );
        // The lock is free for others, and the locker still works.
        locker.lock("k").await.unwrap().release().await.unwrap();
    }
}

/// How an acquire entered the queue, and what its token is, as the server
/// sees it.
mod entry {
    use super::zk_factory;
    use conformance_tests::harness::eventually;
    use conformance_tests::zookeeper::ZkFactory;
    use distlock::lock_zookeeper::names::queue;
    use distlock::{LockGuard, Locker};
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
        let head = queue(&children).into_iter().next().expect("a holder node");
        let stat = raw
            .check_stat(&format!("{dir}/{}", head.name))
            .await
            .unwrap()
            .expect("the holder node");
        assert_eq!(guard.token().get(), stat.czxid.unsigned_abs());
    }

    async fn open(factory: &ZkFactory, namespace: &str) -> Locker {
        let url = conformance_tests::with_query(
            &factory.url(),
            &format!("namespace={namespace}&ttl=10s"),
        );
        distlock::connect(&url).await.unwrap()
    }

    /// A locker in `namespace`, a raw session, and the contenders
    /// directory of key `k`, which exists: the lock was taken and
    /// released once.
    async fn used_once(namespace: &str) -> (Locker, Client, String) {
        let factory = zk_factory().await;
        let locker = open(&factory, namespace).await;
        let raw = factory.raw_client().await.unwrap();
        let dir = factory.lock_dir(&locker, "k").unwrap();
        locker.lock("k").await.unwrap().release().await.unwrap();
        (locker, raw, dir)
    }

    /// A free lock is entered by the transaction that counts the
    /// directory's children; where the session last waited, by a create
    /// with a pipelined listing; either way the token is the node's czxid.
    #[tokio::test]
    async fn a_free_lock_is_taken_in_one_transaction_and_a_busy_one_with_a_listing() {
        let factory = zk_factory().await;
        let (a, b) = (
            open(&factory, "zk-entry").await,
            open(&factory, "zk-entry").await,
        );
        let raw = factory.raw_client().await.unwrap();
        let dir = factory.lock_dir(&a, "k").unwrap();

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
    use super::zk_factory;
    use conformance_tests::harness::eventually;
    use distlock::lock_zookeeper::names::queue;
    use distlock::{LockError, LockGuard};
    use std::time::Duration;
    use tokio::task::JoinHandle;
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
            let names: Vec<String> = queue(&children)
                .into_iter()
                .map(|n| n.name.to_owned())
                .collect();
            (names.len() == count).then_some(names)
        })
        .await
        .unwrap()
    }

    /// The guard a spawned `lock()` of `who` returns, within [`PATIENCE`].
    async fn taken(waiting: JoinHandle<Result<LockGuard, LockError>>, who: &str) -> LockGuard {
        tokio::time::timeout(PATIENCE, waiting)
            .await
            .unwrap_or_else(|_| panic!("{who} never took the lock"))
            .unwrap()
            .unwrap_or_else(|e| panic!("{who} failed to take the lock: {e}"))
    }

    /// a holds, b waits behind it, c behind b. Once c watches b's node,
    /// the directory stops letting anyone list it: a listing by c would
    /// now fail. a releases, b takes the lock and releases it, marked, and
    /// c must take the lock without listing.
    #[tokio::test]
    async fn the_waiter_behind_a_released_holder_takes_the_lock_without_listing() {
        let factory = zk_factory().await;
        let url = conformance_tests::with_query(&factory.url(), "namespace=zk-handoff&ttl=10s");
        let (a, b, c) = (
            distlock::connect(&url).await.unwrap(),
            distlock::connect(&url).await.unwrap(),
            distlock::connect(&url).await.unwrap(),
        );
        let raw = factory.raw_client().await.unwrap();
        let dir = factory.lock_dir(&a, "k").unwrap();

        let held_by_a = a.lock("k").await.unwrap();
        let b_waits = tokio::spawn(async move { b.lock("k").await });
        queued(&raw, &dir, 2).await;
        let c_waits = tokio::spawn(async move { c.lock("k").await });
        let names = queued(&raw, &dir, 3).await;
        let b_node = format!("{dir}/{}", names[1]);
        eventually(PATIENCE, "c to watch b's node", || async {
            let watchers = factory.watchers_of(&b_node).await?;
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
        let held_by_b = taken(b_waits, "b").await;
        held_by_b.release().await.unwrap();
        // c takes it on b's marked release, without listing.
        let held_by_c = taken(c_waits, "c").await;
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
        let factory = zk_factory().await;
        let url = conformance_tests::with_query(&factory.url(), "namespace=zk-handoff-acl&ttl=10s");
        let (a, b) = (
            distlock::connect(&url).await.unwrap(),
            distlock::connect(&url).await.unwrap(),
        );
        let raw = factory.raw_client().await.unwrap();
        let dir = factory.lock_dir(&a, "k").unwrap();

        let held_by_a = a.lock("k").await.unwrap();
        let b_waits = tokio::spawn(async move { b.lock("k").await });
        queued(&raw, &dir, 2).await;
        held_by_a.release().await.unwrap();
        let held_by_b = taken(b_waits, "b").await;
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
