//! Holder values and watches on etcd, beyond the conformance suite: how a
//! value is stored in the queue entry, `set_value` on an entry that is no
//! longer ours, watches that see every holder of a quick run in order and
//! a leaked lease expiring, and what a watch costs the server (one read,
//! one watcher, cancelled on drop). Entries are read and written with a
//! raw client, where the testkit's `layout` says they are.

mod common;
#[path = "common/metrics.rs"]
mod metrics;
#[path = "common/servers.rs"]
mod servers;

use std::time::{Duration, Instant};

use common::connect;
use distlock_testkit::etcd::{raw_client, shared_etcd_url};
use distlock_testkit::layout::etcd_queue_prefix;
use distlock_testkit::states::brief;
use distlock_testkit::{assert_lost, eventually, next_state, next_states, with_query};
use etcd_client::{GetOptions, PutOptions};
use lock_core::{LockError, LockOptions, Locker};
use metrics::metric;
use servers::{single_member, url_for};

/// Slack for scheduling on a busy 2-core machine.
const SLACK: Duration = Duration::from_secs(3);

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

/// The entries of `key`'s queue, oldest first.
async fn queue(
    raw: &etcd_client::Client,
    locker: &Locker,
    key: &str,
) -> Vec<etcd_client::KeyValue> {
    use etcd_client::{SortOrder, SortTarget};
    let prefix = etcd_queue_prefix(&locker.name(key).unwrap());
    let all = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let mut response = raw.kv_client().get(prefix, Some(all)).await.unwrap();
    response.take_kvs()
}

/// An entry without a value holds the owner id alone, as before values
/// existed; a value follows the owner after a newline. `set_value` keeps
/// the entry's create revision (the token) and lease.
#[tokio::test]
async fn entry_holds_owner_then_value_and_set_value_keeps_token_and_lease() {
    let (locker, raw) = locker_and_raw_client("entry-values").await;
    let guard = locker.lock("k").await.unwrap();
    let owner = guard.owner().as_str().to_owned();
    let [plain] = &queue(&raw, &locker, "k").await[..] else {
        panic!("one entry expected")
    };
    assert_eq!(plain.value(), owner.as_bytes());
    guard.set_value("a\nb").await.unwrap();
    let [valued] = &queue(&raw, &locker, "k").await[..] else {
        panic!("one entry expected")
    };
    assert_eq!(valued.value(), format!("{owner}\na\nb").as_bytes());
    assert_eq!(valued.create_revision(), plain.create_revision());
    assert_eq!(valued.lease(), plain.lease());
    assert_eq!(valued.key(), plain.key());
    let seen = locker.inspect("k").await.unwrap().unwrap();
    assert_eq!(
        (seen.owner.as_str(), seen.value.as_str()),
        (owner.as_str(), "a\nb")
    );
    assert_eq!(seen.token, guard.token());
    guard.set_value("").await.unwrap();
    assert_eq!(queue(&raw, &locker, "k").await[0].value(), owner.as_bytes());
    guard.release().await.unwrap();

    let guard = locker
        .lock_with("k", LockOptions::new().value("from the start"))
        .await
        .unwrap();
    let expected = format!("{}\nfrom the start", guard.owner());
    assert_eq!(
        queue(&raw, &locker, "k").await[0].value(),
        expected.as_bytes()
    );
    guard.release().await.unwrap();
}

/// `set_value` on an entry deleted from outside reports the loss and
/// writes nothing: the entry does not come back, and once another locker
/// holds the lock its value stays.
#[tokio::test]
async fn set_value_after_the_entry_is_gone_is_lost_and_writes_nothing() {
    let (locker, raw) = locker_and_raw_client("set-value-lost").await;
    let (other, _) = locker_and_raw_client("set-value-lost").await;
    let guard = locker.lock("k").await.unwrap();
    let entry = queue(&raw, &locker, "k").await[0].key().to_vec();
    raw.kv_client().delete(entry, None).await.unwrap();
    // Not noticed yet (the holder's own watch starts later): the store
    // itself refuses.
    assert!(guard.is_held());
    assert_lost(guard.set_value("stale").await);
    assert!(
        queue(&raw, &locker, "k").await.is_empty(),
        "the entry came back"
    );
    let next = other
        .lock_with("k", LockOptions::new().value("next"))
        .await
        .unwrap();
    assert_lost(guard.set_value("stale").await);
    let holder = locker.inspect("k").await.unwrap();
    assert_eq!(brief(holder), Some((next.token(), "next".to_owned())));
    next.release().await.unwrap();
}

/// Twenty lock, set_value, release cycles as fast as one locker can make
/// them: the watch reports all sixty states in order, with no read per
/// change to fall behind or skip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reports_every_state_of_a_quick_run_in_order() {
    let (locker, _raw) = locker_and_raw_client("watch-quick-run").await;
    let mut watch = locker.watch("k").unwrap();
    assert!(next_state(&mut watch, SLACK).await.is_none());
    let mut expected = Vec::new();
    for i in 0..20 {
        let value = format!("v{i}");
        let guard = locker
            .lock_with("k", LockOptions::new().value(value.as_str()))
            .await
            .unwrap();
        guard.set_value(&format!("{value}+")).await.unwrap();
        let token = guard.token();
        guard.release().await.unwrap();
        expected.push(Some((token, value.clone())));
        expected.push(Some((token, format!("{value}+"))));
        expected.push(None);
    }
    let seen = next_states(&mut watch, expected.len(), SLACK).await;
    assert_eq!(seen.into_iter().map(brief).collect::<Vec<_>>(), expected);
}

/// Waiters queued behind a holder take the lock one after another as
/// each releases at once: the watch reports every holder, in token order,
/// with no free lock in between, then the free lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reports_each_hand_off_of_a_queue() {
    const WAITERS: usize = 5;
    let (locker, raw) = locker_and_raw_client("watch-hand-offs").await;
    let first = locker
        .lock_with("k", LockOptions::new().value("first"))
        .await
        .unwrap();
    let mut watch = locker.watch("k").unwrap();
    assert_eq!(
        brief(next_state(&mut watch, SLACK).await),
        Some((first.token(), "first".to_owned()))
    );
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let waiter = locker.clone();
        waiters.push(tokio::spawn(async move {
            let value = format!("waiter-{i}");
            let guard = waiter
                .lock_with("k", LockOptions::new().value(value.as_str()))
                .await?;
            let token = guard.token();
            guard.release().await?;
            Ok::<_, LockError>((token, value))
        }));
        // Queued in this order: wait for the entry before the next one.
        eventually(SLACK, "the waiter to queue", || async {
            queue(&raw, &locker, "k").await.len() == i + 2
        })
        .await
        .unwrap();
    }
    first.release().await.unwrap();
    let mut expected = Vec::new();
    for waiter in waiters {
        expected.push(Some(waiter.await.unwrap().unwrap()));
    }
    expected.sort();
    expected.push(None);
    let seen = next_states(&mut watch, expected.len(), SLACK).await;
    assert_eq!(seen.into_iter().map(brief).collect::<Vec<_>>(), expected);
}

/// A holder whose lease nobody renews any more (its process gone, here an
/// entry put with a raw lease) is reported replaced by the waiter behind
/// it when etcd expires the lease: not before the lease's ttl, and within
/// a second after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reports_a_leaked_lease_expiring() {
    let (locker, raw) = locker_and_raw_client("watch-leaked-lease").await;
    let lease = raw.lease_client().grant(2, None).await.unwrap();
    let granted_at = Instant::now();
    let prefix = etcd_queue_prefix(&locker.name("k").unwrap());
    let put = PutOptions::new().with_lease(lease.id());
    raw.kv_client()
        .put(format!("{prefix}leaked-0"), "gone/1/ab\nleaked", Some(put))
        .await
        .unwrap();
    let mut watch = locker.watch("k").unwrap();
    let leaked = next_state(&mut watch, SLACK)
        .await
        .expect("the leaked holder");
    assert_eq!(
        (leaked.owner.as_str(), leaked.value.as_str()),
        ("gone/1/ab", "leaked")
    );
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .lock_with("k", LockOptions::new().value("next").wait(SLACK * 2))
                .await
        })
    };
    let next = next_state(&mut watch, Duration::from_secs(2) + SLACK)
        .await
        .expect("the expiry was reported as a free lock");
    let replaced_after = granted_at.elapsed();
    assert_eq!(next.value, "next");
    assert!(next.token > leaked.token);
    assert!(
        replaced_after >= Duration::from_millis(1900)
            && replaced_after < Duration::from_millis(3500),
        "replaced {replaced_after:?} after the grant of a 2 s lease"
    );
    let guard = waiter.await.unwrap().unwrap();
    assert_eq!(guard.token(), next.token);
    guard.release().await.unwrap();
    assert!(next_state(&mut watch, SLACK).await.is_none());
}

/// Range requests etcd received.
async fn range_requests(server: &distlock_testkit::Server) -> u64 {
    metric(
        server,
        r#"grpc_server_started_total{grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} "#,
    )
    .await
}

/// Watchers etcd keeps.
async fn watchers(server: &distlock_testkit::Server) -> u64 {
    metric(server, "etcd_debugging_mvcc_watcher_total ").await
}

/// A watch reads the queue once, follows thirty changes without another
/// read, costs one watcher on the server and cancels it when dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_reads_once_and_its_watcher_goes_with_it() {
    let server = single_member("etcd-watch-cost").await;
    let locker = connect(&url_for([server.addr()], "3s", "watch-cost"))
        .await
        .unwrap();
    let (ranges, idle) = (range_requests(&server).await, watchers(&server).await);
    let mut watch = locker.watch("k").unwrap();
    assert!(next_state(&mut watch, SLACK).await.is_none());
    for i in 0..10 {
        let guard = locker.lock("k").await.unwrap();
        guard.set_value(&format!("v{i}")).await.unwrap();
        guard.release().await.unwrap();
    }
    for _ in 0..30 {
        next_state(&mut watch, SLACK).await;
    }
    assert_eq!(
        range_requests(&server).await - ranges,
        1,
        "reads per change"
    );
    assert_eq!(watchers(&server).await, idle + 1);
    drop(watch);
    eventually(SLACK, "the dropped watch's watcher to go", || async {
        watchers(&server).await == idle
    })
    .await
    .unwrap();
}
