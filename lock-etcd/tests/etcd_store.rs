//! etcd behaviour beyond the conformance suite, on one member shared by
//! the tests of this binary: the flags the store declares, how queue
//! entries are named and reused, and a waiter whose own lease is revoked.
//! Queues are read with a raw client, where the testkit's `layout` says
//! they are.

mod common;

use common::connect;
use distlock_testkit::etcd::{holder_entry, keys_under, raw_client, shared_etcd_url};
use distlock_testkit::layout::etcd_queue_prefix;
use distlock_testkit::with_query;
use lock_core::backend::Capabilities;
use lock_core::backend::Capability::{Remote, WatchEveryChange};
use lock_core::Locker;

/// Pins the flags, so none flips unnoticed: locks live as long as the
/// session lease (no per-lock expiry); everything else etcd does, its
/// watches delivering every change.
#[tokio::test]
async fn etcd_declares_its_capabilities() {
    let url = shared_etcd_url().await.expect("etcd test server");
    let locker = connect(&url).await.unwrap();
    let caps = locker.capabilities();
    let expected = Capabilities::QUEUEING_STORE.with(&[Remote, WatchEveryChange]);
    assert_eq!(caps, expected);
}

/// A locker on the shared member in `namespace` with a 3 s ttl, and a raw
/// client on the same member.
async fn locker_and_raw_client(namespace: &str) -> (Locker, etcd_client::Client) {
    let url = shared_etcd_url().await.expect("etcd test server");
    let url = with_query(&url, &format!("namespace={namespace}&ttl=3s"));
    (
        connect(&url).await.unwrap(),
        raw_client(&url).await.unwrap(),
    )
}

/// etcd's index keeps every key written until compaction, and each
/// acquisition reads its queue by prefix: a fresh entry key per
/// acquisition would make a busy lock slower with every use. One locker
/// taking a lock again and again writes one key; two of its acquisitions
/// queued at once use two.
#[tokio::test]
async fn repeated_acquisitions_reuse_one_entry_key() {
    use std::time::Duration;

    let (locker, raw) = locker_and_raw_client("reuse-entry-keys").await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let guard = locker.lock("k").await.unwrap();
        let (entry, _) = holder_entry(&raw, &locker.name("k").unwrap())
            .await
            .unwrap()
            .unwrap();
        seen.push(entry);
        guard.release().await.unwrap();
    }
    assert!(seen.windows(2).all(|w| w[0] == w[1]), "{seen:?}");

    let first = locker.lock("k").await.unwrap();
    let waiting = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.lock("k").await })
    };
    // The second acquisition's entry is the newest of the queue.
    let prefix = etcd_queue_prefix(&locker.name("k").unwrap());
    let newest = etcd_client::GetOptions::new().with_prefix().with_sort(
        etcd_client::SortTarget::Create,
        etcd_client::SortOrder::Descend,
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let queued = loop {
        let response = raw
            .kv_client()
            .get(prefix.clone(), Some(newest.clone()))
            .await
            .unwrap();
        if response.kvs().len() == 2 {
            break response.kvs()[0].key().to_vec();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second acquisition never queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        seen[0],
        holder_entry(&raw, &locker.name("k").unwrap())
            .await
            .unwrap()
            .unwrap()
            .0
    );
    assert_ne!(queued, seen[0]);
    first.release().await.unwrap();
    let second = waiting.await.unwrap().unwrap();
    assert_eq!(
        holder_entry(&raw, &locker.name("k").unwrap())
            .await
            .unwrap()
            .unwrap()
            .0,
        queued
    );
    second.release().await.unwrap();
}

/// Two calls of one locker share its lease, so revoking it deletes the
/// holder's entry and the waiter's at once. The waiter, seeing its
/// predecessor (at the head) go, must not take the lock with its own entry
/// gone: it queues again on a new lease and holds a lock that stays held.
#[tokio::test]
async fn a_waiter_behind_an_entry_of_its_own_lease_survives_the_revocation() {
    use lock_core::LockOptions;
    use std::time::Duration;

    let (locker, raw) = locker_and_raw_client("revoke-own-lease").await;
    let first = locker.lock("k").await.unwrap();
    let waiting = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .lock_with("k", LockOptions::new().wait(Duration::from_secs(20)))
                .await
        })
    };
    let prefix = etcd_queue_prefix(&locker.name("k").unwrap());
    let count = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while raw
        .kv_client()
        .get(prefix.clone(), Some(count.clone()))
        .await
        .unwrap()
        .count()
        < 2
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiter never queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, lease) = holder_entry(&raw, &locker.name("k").unwrap())
        .await
        .unwrap()
        .unwrap();
    raw.lease_client().revoke(lease).await.unwrap();

    tokio::time::timeout(Duration::from_secs(10), first.lost())
        .await
        .expect("the revocation was not noticed");
    let second = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiter never got the lock")
        .unwrap()
        .unwrap();
    // Long past the holder's watch on its own entry (100 ms late at most,
    // plus etcd's 100 ms catch-up of watches that start in the past).
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        second.is_held(),
        "the waiter took the lock with its entry gone"
    );
    let (_, new_lease) = holder_entry(&raw, &locker.name("k").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_ne!(new_lease, lease);
    second.release().await.unwrap();
}

/// Where read locks and permits live: a reader's entry is in the lock's
/// own queue, its name marked `r`; a semaphore's entries are in a queue of
/// their own beside the lock's, and its limit in a key beside both;
/// tokens are the entries' create revisions.
#[tokio::test]
async fn read_locks_and_permits_are_laid_out_beside_the_lock() {
    let (locker, raw) = locker_and_raw_client("shared-layout").await;
    let read = locker.rwlock("cfg").unwrap().read().await.unwrap();
    let permit = locker
        .semaphore("pool", 2)
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let root = format!("distlock/{}/", locker.namespace());
    let all = raw
        .kv_client()
        .get(
            root.clone(),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    let mut keys: Vec<(String, String)> = all
        .kvs()
        .iter()
        .map(|kv| {
            let key = kv
                .key_str()
                .unwrap()
                .strip_prefix(&root)
                .unwrap()
                .to_owned();
            let value = if key.ends_with("%limit") {
                kv.value_str().unwrap().to_owned()
            } else {
                String::new()
            };
            (key, value)
        })
        .collect();
    keys.sort();
    assert_eq!(keys.len(), 3, "{keys:?}");
    assert!(
        keys[0].0.starts_with("cfg/") && keys[0].0.ends_with("-0r"),
        "{keys:?}"
    );
    assert_eq!(
        keys[1],
        ("pool%limit".to_owned(), "2".to_owned()),
        "{keys:?}"
    );
    assert!(
        keys[2].0.starts_with("pool%permits/") && keys[2].0.ends_with("-0"),
        "{keys:?}"
    );
    assert_eq!(
        (read.token().get(), permit.token().get()),
        (
            u64::try_from(
                all.kvs()
                    .iter()
                    .find(|kv| kv.key_str().unwrap().ends_with("-0r"))
                    .unwrap()
                    .create_revision()
            )
            .unwrap(),
            u64::try_from(
                all.kvs()
                    .iter()
                    .find(|kv| kv.key_str().unwrap().contains("%permits/"))
                    .unwrap()
                    .create_revision()
            )
            .unwrap(),
        ),
        "tokens are the entries' create revisions"
    );
    read.release().await.unwrap();
    permit.release().await.unwrap();
}

/// A process frozen past its session lease runs again before its timers
/// (the keepalive's and the validity timer): the guard must say "lost" at
/// once, since etcd may have expired the lease and given the lock on.
#[tokio::test]
async fn a_guard_frozen_past_its_session_lease_says_lost_before_any_timer_runs() {
    let url = shared_etcd_url().await.expect("etcd test server");
    let url = with_query(&url, "namespace=frozen-past-lease&ttl=2s");
    let locker = connect(&url).await.unwrap();
    let guard = locker.lock("k").await.unwrap();
    assert!(guard.is_held());
    // Blocks the only runtime thread, as SIGSTOP would the process.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(
        !guard.is_held(),
        "a guard whose session lease ran out while frozen still says held"
    );
}

/// Purging a namespace deletes every key under `distlock/<namespace>/`
/// (queues of nested keys, read locks, permits and the semaphore's stored
/// limit) and its holders are told; a namespace whose name merely starts
/// with the same letters keeps its keys.
#[tokio::test]
async fn purging_a_namespace_deletes_its_keys_and_nothing_else() {
    use std::time::Duration;

    let (purged, raw) = locker_and_raw_client("purge-me").await;
    let (kept, _) = locker_and_raw_client("purge-me-not").await;
    let mut guards = Vec::new();
    for key in ["a", "a/b/c"] {
        guards.push(purged.lock(key).await.unwrap());
    }
    guards.push(purged.rwlock("shared").unwrap().read().await.unwrap());
    let pool = purged.semaphore("pool", 2).unwrap();
    guards.push(pool.acquire().await.unwrap());
    let kept_guard = kept.lock("a").await.unwrap();
    assert!(keys_under(&raw, "distlock/purge-me/").await.unwrap() >= 5);

    purged.purge_namespace().await.unwrap();

    assert_eq!(keys_under(&raw, "distlock/purge-me/").await.unwrap(), 0);
    for guard in &guards {
        tokio::time::timeout(Duration::from_secs(10), guard.lost())
            .await
            .unwrap_or_else(|_| panic!("{} was never reported lost", guard.key()));
    }
    assert!(kept_guard.is_held());
    assert_eq!(keys_under(&raw, "distlock/purge-me-not/").await.unwrap(), 1);
    kept_guard.release().await.unwrap();
}
