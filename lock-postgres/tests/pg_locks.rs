//! Exclusive locks against a real PostgreSQL server (see `common::pg_url`):
//! the layout's creation, mutual exclusion and tokens under contention,
//! wake-ups by NOTIFY, the `holds` function, expiry on the server's clock,
//! and what a cancelled wait leaves behind.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{connect, entries, pg_url, pg_url_with, raw, unique};
use lock_core::open::open_store;
use lock_core::{LockError, LockOptions, Locker, LossReason};
use lock_postgres::{schema_sql, PgStore, SchemaName};

/// A locker in a fresh namespace with `ttl`.
async fn locker(namespace: &str, ttl: &str) -> Locker {
    connect(&pg_url_with(&format!("namespace={namespace}&ttl={ttl}")).await).await
}

/// Drops a test's own schema once its lockers (dropped before) have
/// closed their sessions, so the drop does not race their clean-up.
async fn drop_schema(client: &tokio_postgres::Client, schema: &str) {
    let sql = format!("SELECT count(*) FROM \"{schema}\".sessions");
    let deadline = Instant::now() + Duration::from_secs(5);
    while client.query_one(&sql, &[]).await.unwrap().get::<_, i64>(0) != 0 {
        assert!(Instant::now() < deadline, "sessions stayed in {schema}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

#[tokio::test]
async fn concurrent_start_ups_create_the_layout_once() {
    let schema = unique("s");
    let url = pg_url_with(&format!("schema={schema}")).await;
    let opened = futures_util::future::join_all((0..4).map(|_| open_store::<PgStore>(&url))).await;
    for locker in opened {
        let locker = locker.expect("every concurrent start-up succeeds");
        let guard = locker.lock("k").await.unwrap();
        guard.release().await.unwrap();
    }
    let client = raw(&pg_url().await).await;
    let version: i32 = client
        .query_one(&format!("SELECT version FROM \"{schema}\".version"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, lock_postgres::SCHEMA_VERSION);
    // The published SQL is the one that ran, and running it again is a no-op.
    let sql = schema_sql(&SchemaName::new(&schema).unwrap());
    client.batch_execute(&sql).await.expect("idempotent");
    drop_schema(&client, &schema).await;
}

#[tokio::test]
async fn without_create_schema_a_missing_table_is_named() {
    let schema = unique("absent");
    let url = pg_url_with(&format!("schema={schema}&create_schema=false")).await;
    match open_store::<PgStore>(&url).await {
        Err(LockError::InvalidConfig { reason }) => {
            assert!(
                reason.contains(&format!("\"{schema}\".version")),
                "{reason}"
            );
            assert!(reason.contains("create_schema=false"), "{reason}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[tokio::test]
async fn one_holder_at_a_time_with_rising_tokens() {
    let namespace = unique("excl");
    let inside = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let locker = locker(&namespace, "10s").await;
        let (inside, tokens) = (Arc::clone(&inside), Arc::clone(&tokens));
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let guard = locker.lock("shared").await.unwrap();
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                tokens.lock().unwrap().push(guard.token().get());
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 30);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert_eq!(entries(&pg_url().await, &namespace).await, 0);
}

#[tokio::test]
async fn a_busy_try_and_a_timed_out_wait_leave_nothing_behind() {
    let namespace = unique("try");
    let (a, b) = (
        locker(&namespace, "10s").await,
        locker(&namespace, "10s").await,
    );
    let guard = a.lock("k").await.unwrap();
    assert!(b.try_lock("k").await.unwrap().is_none());
    let waited = b
        .lock_with("k", LockOptions::new().wait(Duration::from_millis(300)))
        .await;
    assert!(
        matches!(waited, Err(LockError::Timeout { .. })),
        "{waited:?}"
    );
    // The dropped wait's entry goes in the background.
    let deadline = Instant::now() + Duration::from_secs(5);
    while entries(&pg_url().await, &namespace).await != 1 {
        assert!(Instant::now() < deadline, "the waiter's entry stayed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    guard.release().await.unwrap();
    assert_eq!(entries(&pg_url().await, &namespace).await, 0);
}

#[tokio::test]
async fn release_wakes_the_waiter_by_notification() {
    // ttl 30 s: the bounded re-check comes every 5 s, so a prompt hand-over
    // can only come from the NOTIFY.
    let namespace = unique("wake");
    let (a, b) = (
        locker(&namespace, "30s").await,
        locker(&namespace, "30s").await,
    );
    let guard = a.lock("k").await.unwrap();
    let waiter = tokio::spawn(async move {
        let guard = b.lock("k").await.unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let (woken, guard) = waiter.await.unwrap();
    let delay = woken.duration_since(released);
    assert!(delay < Duration::from_secs(2), "woken after {delay:?}");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn holds_is_true_only_for_the_live_holder() {
    let namespace = unique("holds");
    let a = locker(&namespace, "10s").await;
    let guard = a.lock("k").await.unwrap();
    let token = i64::try_from(guard.token().get()).unwrap();
    let client = raw(&pg_url().await).await;
    let holds = |token: i64| {
        let (client, namespace) = (&client, namespace.clone());
        async move {
            client
                .query_one("SELECT distlock.holds($1, 'k', $2)", &[&namespace, &token])
                .await
                .unwrap()
                .get::<_, bool>(0)
        }
    };
    assert!(holds(token).await);
    assert!(!holds(token - 1).await);
    // A waiter's entry exists in a live session, but does not hold.
    let b = locker(&namespace, "10s").await;
    let waiter = tokio::spawn(async move { b.lock("k").await.unwrap() });
    let waiting = loop {
        let row = client
            .query_one(
                "SELECT max(id) FROM distlock.entries WHERE namespace = $1",
                &[&namespace],
            )
            .await
            .unwrap();
        match row.get::<_, Option<i64>>(0) {
            Some(id) if id > token => break id,
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    };
    assert!(!holds(waiting).await, "a waiter does not hold");
    guard.release().await.unwrap();
    assert!(!holds(token).await);
    let next = waiter.await.unwrap();
    assert_eq!(i64::try_from(next.token().get()).unwrap(), waiting);
    assert!(holds(waiting).await);
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_session_expired_on_the_server_frees_the_lock_and_is_heard() {
    let namespace = unique("expiry");
    let (a, b) = (
        locker(&namespace, "3s").await,
        locker(&namespace, "3s").await,
    );
    let guard = a.lock("k").await.unwrap();
    let loss = guard.loss_signal();
    raw(&pg_url().await)
        .await
        .execute(
            "UPDATE distlock.sessions SET expires_at = now() - interval '1 second' \
             WHERE id IN (SELECT session_id FROM distlock.entries WHERE namespace = $1)",
            &[&namespace],
        )
        .await
        .unwrap();
    let other = b
        .lock_with("k", LockOptions::new().wait(Duration::from_secs(5)))
        .await
        .expect("an expired holder does not block");
    assert!(other.token() > guard.token());
    let reason = tokio::time::timeout(Duration::from_secs(3), loss.lost())
        .await
        .expect("the holder hears its session's expiry within the ttl");
    assert_eq!(reason, LossReason::SessionExpired);
    other.release().await.unwrap();
}

#[tokio::test]
async fn force_release_is_heard_as_taken_away_and_hands_over() {
    let namespace = unique("force");
    let (a, b) = (
        locker(&namespace, "3s").await,
        locker(&namespace, "3s").await,
    );
    let guard = a.lock("k").await.unwrap();
    let loss = guard.loss_signal();
    let waiter = tokio::spawn(async move { b.lock("k").await.unwrap() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(a.force_release("k").await.unwrap());
    let next = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiter is woken by the removal")
        .unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(3), loss.lost())
        .await
        .expect("the holder hears the removal at its next renewal");
    assert_eq!(reason, LossReason::TakenAway);
    assert!(next.token() > guard.token());
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_dropped_locker_removes_its_session_at_once() {
    // A schema of its own: no other test's sessions in it.
    let schema = unique("closing");
    let url = pg_url_with(&format!("schema={schema}&ttl=30s")).await;
    let locker = open_store::<PgStore>(&url).await.unwrap();
    locker.lock("k").await.unwrap().release().await.unwrap();
    let client = raw(&pg_url().await).await;
    let sql = format!("SELECT count(*) FROM \"{schema}\".sessions");
    let sessions = || async { client.query_one(&sql, &[]).await.unwrap().get::<_, i64>(0) };
    assert_eq!(sessions().await, 1);
    drop(locker);
    // Far sooner than the 30 s ttl.
    let deadline = Instant::now() + Duration::from_secs(3);
    while sessions().await != 0 {
        assert!(Instant::now() < deadline, "the session row stayed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop_schema(&client, &schema).await;
}

#[tokio::test]
async fn a_host_list_skips_a_dead_host() {
    let namespace = unique("hosts");
    let url = pg_url_with(&format!("namespace={namespace}&connect_timeout=1s")).await;
    assert!(url.contains("@127.0.0.1:"), "the test URL names 127.0.0.1");
    // Port 1 refuses at once; the server is the second host.
    let url = url.replacen("@127.0.0.1:", "@127.0.0.1:1,127.0.0.1:", 1);
    let locker = open_store::<PgStore>(&url)
        .await
        .expect("the live host is used");
    let guard = locker.lock("k").await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test]
async fn one_renewal_statement_per_interval_whatever_the_holds() {
    let schema = unique("renewals");
    let url = pg_url_with(&format!("schema={schema}&ttl=3s")).await;
    let locker = open_store::<PgStore>(&url).await.unwrap();
    let mut guards = Vec::new();
    for key in ["a", "b", "c", "d", "e"] {
        guards.push(locker.lock(key).await.unwrap());
    }
    // Count UPDATE statements on the sessions table from now on.
    let client = raw(&pg_url().await).await;
    client
        .batch_execute(&format!(
            "CREATE TABLE \"{schema}\".updates (at timestamptz);
             CREATE FUNCTION \"{schema}\".count_update() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN INSERT INTO \"{schema}\".updates VALUES (now()); RETURN NULL; END $$;
             CREATE TRIGGER counted AFTER UPDATE ON \"{schema}\".sessions
               FOR EACH STATEMENT EXECUTE FUNCTION \"{schema}\".count_update();"
        ))
        .await
        .unwrap();
    // The window: three renewal intervals (ttl/3 = 1 s) and a half.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let updates: i64 = client
        .query_one(&format!("SELECT count(*) FROM \"{schema}\".updates"), &[])
        .await
        .unwrap()
        .get(0);
    assert!((2..=4).contains(&updates), "{updates} renewals for 5 holds");
    for guard in guards {
        guard.release().await.unwrap();
    }
    drop(locker);
    drop_schema(&client, &schema).await;
}
