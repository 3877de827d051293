//! Release by a plain delete of our own entry: safe because an entry's
//! name is never given to another acquisition while a delete naming it may
//! still reach the server. Each test makes a release whose delete was not
//! answered (the network to etcd silenced through the fault proxy), then
//! re-acquires the same key with the same locker, and then delivers the
//! old delete once more, as a copy held up in the network would arrive
//! late: the new acquisition must stay untouched.

mod common;

use std::time::Duration;

use common::connect;
use distlock_testkit::etcd::{holder_entry, raw_client};
use lock_core::{LockError, Locker};
use servers::{proxied_member, single_member, url_for};

#[path = "common/servers.rs"]
mod servers;

/// The key of the entry holding `key` now (the lowest of its queue), read
/// with a raw client.
async fn holder_key(raw: &etcd_client::Client, locks: &Locker, key: &str) -> Option<Vec<u8>> {
    holder_entry(raw, &locks.name(key).unwrap())
        .await
        .unwrap()
        .map(|(entry, _)| entry)
}

/// Waits (bounded) until `key` has no holder entry left in the store.
async fn until_free(raw: &etcd_client::Client, locks: &Locker, key: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while holder_key(raw, locks, key).await.is_some() {
        assert!(tokio::time::Instant::now() < deadline, "the entry stayed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A release whose delete went unanswered (the network silenced until the
/// call gave up), then the same locker takes the same key again: the new
/// entry has another name, and the old delete arriving late removes
/// nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_delete_of_a_released_entry_leaves_the_next_acquisition_alone() {
    let net = proxied_member("etcd-late-release", "3s", "late").await;
    let url = format!(
        "{}&response_timeout=1s",
        net.through.replace("&response_timeout=2s", "")
    );
    let locks = connect(&url).await.unwrap();
    let raw = raw_client(&net.direct).await.unwrap();

    let first = locks.lock("k").await.unwrap();
    let old_entry = holder_key(&raw, &locks, "k").await.expect("held");
    net.proxy.blackhole();
    let released = first.release().await;
    assert!(
        matches!(released, Err(LockError::Unavailable { .. })),
        "{released:?}"
    );
    net.proxy.restore();
    // The held delete (or the background retry) goes through.
    until_free(&raw, &locks, "k").await;
    // Take the key again and again while the background release finishes
    // and after: the old name must never come back.
    let window = tokio::time::Instant::now() + Duration::from_secs(2);
    while tokio::time::Instant::now() < window {
        let again = locks.lock("k").await.unwrap();
        let entry = holder_key(&raw, &locks, "k").await.expect("held");
        assert_ne!(
            entry, old_entry,
            "the name of an entry whose delete went unanswered was handed out again"
        );
        again.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let second = locks.lock("k").await.unwrap();
    let new_entry = holder_key(&raw, &locks, "k").await.expect("held");
    // The old delete, once more, as a late copy would arrive.
    raw.kv_client().delete(old_entry, None).await.unwrap();

    assert!(second.is_held());
    assert_eq!(
        holder_key(&raw, &locks, "k").await,
        Some(new_entry),
        "the late delete removed the next acquisition's entry"
    );
    let info = locks.inspect("k").await.unwrap().expect("held");
    assert_eq!(info.token, second.token());
    second.release().await.unwrap();
}

/// A release whose first delete went through but whose answer was lost
/// (the connection cut right after the server applied it) is retried: the
/// retry finds nothing and the release still succeeds, since the session
/// is alive and the first try removed the entry. The name stays reserved,
/// so a later acquisition is not removed by the first try arriving again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_release_after_a_lost_answer_succeeds_and_keeps_the_name() {
    let net = proxied_member("etcd-retried-release", "3s", "retried").await;
    let locks = connect(&net.through).await.unwrap();
    let raw = raw_client(&net.direct).await.unwrap();

    let first = locks.lock("k").await.unwrap();
    let old_entry = holder_key(&raw, &locks, "k").await.expect("held");
    // Answers take a while to come back: long enough to cut the connection
    // once the server has applied the delete and before its answer arrives.
    net.proxy.set_latency(Duration::from_millis(400));
    let releasing = tokio::spawn(first.release());
    until_free(&raw, &locks, "k").await;
    net.cut().await;
    net.proxy.set_latency(Duration::ZERO);
    net.proxy.restore();
    let released = releasing.await.unwrap();
    assert!(released.is_ok(), "{released:?}");

    let second = locks.lock("k").await.unwrap();
    let new_entry = holder_key(&raw, &locks, "k").await.expect("held");
    assert_ne!(new_entry, old_entry, "a retried delete's name was reused");
    raw.kv_client().delete(old_entry, None).await.unwrap();
    assert!(second.is_held());
    assert_eq!(holder_key(&raw, &locks, "k").await, Some(new_entry));
    second.release().await.unwrap();
}

/// An answered release gives the name back: the next acquisition of the
/// key reuses it, so a lock taken again and again writes one key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answered_release_gives_its_name_back() {
    let server = single_member("etcd-answered-release").await;
    let url = url_for([server.addr()], "3s", "answered");
    let locks = connect(&url).await.unwrap();
    let raw = raw_client(&url).await.unwrap();
    let first = locks.lock("k").await.unwrap();
    let entry = holder_key(&raw, &locks, "k").await.expect("held");
    first.release().await.unwrap();
    let second = locks.lock("k").await.unwrap();
    assert_eq!(holder_key(&raw, &locks, "k").await, Some(entry));
    second.release().await.unwrap();
}
