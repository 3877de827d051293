//! Read locks and semaphore permits against a real PostgreSQL server (see
//! `common::pg_url`), seen from inside the database: the `holds` function
//! follows each kind's grant rule, and a key's lock and its semaphore are
//! separate lines.

mod common;

use std::time::Duration;

use common::{connect, pg_url, pg_url_with, raw, unique};
use lock_core::{LockGuard, Locker};
use tokio::task::JoinHandle;
use tokio_postgres::Client;

/// A locker in `namespace`.
async fn locker(namespace: &str) -> Locker {
    connect(&pg_url_with(&format!("namespace={namespace}&ttl=10s")).await).await
}

/// What `holds(namespace, 'k', token)` answers now.
async fn holds(client: &Client, namespace: &str, token: i64) -> bool {
    client
        .query_one("SELECT distlock.holds($1, 'k', $2)", &[&namespace, &token])
        .await
        .expect("holds()")
        .get(0)
}

/// The token of `guard`, as the database stores it.
fn token(guard: &LockGuard) -> i64 {
    i64::try_from(guard.token().get()).expect("token fits an int8")
}

/// Waits until the namespace has an entry newer than `after` (a waiter
/// queued behind it), and returns its id.
async fn entry_after(client: &Client, namespace: &str, after: i64) -> i64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let row = client
            .query_one(
                "SELECT max(id) FROM distlock.entries WHERE namespace = $1",
                &[&namespace],
            )
            .await
            .expect("read the entries");
        if let Some(id) = row.get::<_, Option<i64>>(0).filter(|&id| id > after) {
            return id;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no waiter queued behind {after}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Takes `take`'s guard in a task, so that it can queue while we look.
fn queued<F>(take: F) -> JoinHandle<LockGuard>
where
    F: std::future::Future<Output = Result<LockGuard, lock_core::LockError>> + Send + 'static,
{
    tokio::spawn(async move { take.await.expect("queued request") })
}

#[tokio::test]
async fn readers_hold_together_and_a_waiting_writer_holds_nothing() {
    let namespace = unique("shared_holds");
    let (a, b, c) = (
        locker(&namespace).await,
        locker(&namespace).await,
        locker(&namespace).await,
    );
    let client = raw(&pg_url().await).await;
    let first = a.rwlock("k").unwrap().read().await.unwrap();
    let second = b.rwlock("k").unwrap().read().await.unwrap();
    assert!(holds(&client, &namespace, token(&first)).await);
    assert!(holds(&client, &namespace, token(&second)).await);
    let rw = c.rwlock("k").unwrap();
    let writer = queued(async move { rw.write().await });
    let writing = entry_after(&client, &namespace, token(&second)).await;
    assert!(
        !holds(&client, &namespace, writing).await,
        "a writer behind readers holds"
    );
    // A reader arriving behind the waiting writer waits, and holds nothing.
    let rw = a.rwlock("k").unwrap();
    let late = queued(async move { rw.read().await });
    let late_reading = entry_after(&client, &namespace, writing).await;
    assert!(
        !holds(&client, &namespace, late_reading).await,
        "a reader overtook a writer"
    );
    first.release().await.unwrap();
    assert!(
        !holds(&client, &namespace, writing).await,
        "a writer beside a reader"
    );
    second.release().await.unwrap();
    let writing_guard = writer.await.unwrap();
    assert_eq!(token(&writing_guard), writing);
    assert!(holds(&client, &namespace, writing).await);
    assert!(!holds(&client, &namespace, late_reading).await);
    writing_guard.release().await.unwrap();
    let reading = late.await.unwrap();
    assert!(holds(&client, &namespace, token(&reading)).await);
    reading.release().await.unwrap();
}

#[tokio::test]
async fn permits_hold_up_to_the_limit_apart_from_the_lock() {
    let namespace = unique("permit_holds");
    let (a, b) = (locker(&namespace).await, locker(&namespace).await);
    let client = raw(&pg_url().await).await;
    // The key's lock is held: its semaphore is another line.
    let lock = a.lock("k").await.unwrap();
    let pool = b.semaphore("k", 2).unwrap();
    let first = pool.acquire().await.unwrap();
    let second = pool.acquire().await.unwrap();
    assert!(holds(&client, &namespace, token(&first)).await);
    assert!(holds(&client, &namespace, token(&second)).await);
    assert!(
        holds(&client, &namespace, token(&lock)).await,
        "permits took the lock"
    );
    let other = a.semaphore("k", 2).unwrap();
    let third = queued(async move { other.acquire().await });
    let waiting = entry_after(&client, &namespace, token(&second)).await;
    assert!(
        !holds(&client, &namespace, waiting).await,
        "a third permit under limit 2"
    );
    // The older permit going lets the third in, not the lock's release.
    lock.release().await.unwrap();
    assert!(!holds(&client, &namespace, waiting).await);
    first.release().await.unwrap();
    let third = third.await.unwrap();
    assert_eq!(token(&third), waiting);
    assert!(holds(&client, &namespace, waiting).await);
    assert!(holds(&client, &namespace, token(&second)).await);
    second.release().await.unwrap();
    third.release().await.unwrap();
}

/// A writer queued behind two readers is let in by the last reader to
/// leave, not by the one it queued right behind: the reader that came
/// second leaving first hands nothing over.
#[tokio::test]
async fn a_waiting_writer_is_not_let_in_while_an_older_reader_reads() {
    let namespace = unique("readers_leave");
    let (a, b, c) = (
        locker(&namespace).await,
        locker(&namespace).await,
        locker(&namespace).await,
    );
    let client = raw(&pg_url().await).await;
    let older = a.rwlock("k").unwrap().read().await.unwrap();
    let newer = b.rwlock("k").unwrap().read().await.unwrap();
    let rw = c.rwlock("k").unwrap();
    let mut writer = queued(async move { rw.write().await });
    let writing = entry_after(&client, &namespace, token(&newer)).await;
    newer.release().await.unwrap();
    let early = tokio::time::timeout(Duration::from_millis(500), &mut writer).await;
    assert!(early.is_err(), "the writer got in beside a reader");
    assert!(holds(&client, &namespace, token(&older)).await);
    older.release().await.unwrap();
    let writing_guard = writer.await.unwrap();
    assert_eq!(token(&writing_guard), writing);
    writing_guard.release().await.unwrap();
}
