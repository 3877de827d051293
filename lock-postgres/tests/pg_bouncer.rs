//! Through PgBouncer in transaction mode (the testkit's, in front of a
//! server it spawns): without `listen_url`, waits end at the periodic
//! re-check, said once in the log (per locker). (The conformance suite
//! runs through PgBouncer, with `listen_url`, in conformance-tests.)

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{entries, unique};
use distlock_testkit::pgbouncer::{shared_pgbouncer, PgBouncer};
use distlock_testkit::postgres::{shared_postgres, PgServer};
use distlock_testkit::with_query;
use lock_core::open::open_store;
use lock_core::Locker;
use lock_postgres::PgStore;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// The shared bouncer and the server behind it.
async fn bouncer() -> (&'static PgBouncer, &'static PgServer) {
    let bouncer = shared_pgbouncer().await.expect("PgBouncer for the tests");
    let server = shared_postgres().await.expect("PostgreSQL for the tests");
    (bouncer, server)
}

/// Records the store's warnings that name `listen_url`.
#[derive(Clone, Default)]
struct ListenWarnings(Arc<Mutex<Vec<String>>>);

impl<S: Subscriber> Layer<S> for ListenWarnings {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        if !meta.target().starts_with("lock_postgres") || *meta.level() != Level::WARN {
            return;
        }
        let mut message = String::new();
        event.record(
            &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                message.push_str(&format!("{}={value:?} ", field.name()));
            },
        );
        if message.contains("listen_url") {
            self.0.lock().unwrap().push(message);
        }
    }
}

/// `holder` holds the key while `waiter` queues and waits behind it (ttl
/// 600 ms: re-checks every 200 ms), then lets go: the waiter must get it
/// within `limit`.
async fn hand_over(holder: &Locker, waiter: &Locker, server: &PgServer, ns: &str, limit: Duration) {
    let guard = holder.lock("k").await.unwrap();
    let waiting = waiter.lock("k");
    tokio::pin!(waiting);
    let deadline = Instant::now() + Duration::from_secs(10);
    // Drive the waiter until its entry is in the queue.
    while entries(&server.url(), ns).await != 2 {
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::select! {
            biased;
            got = &mut waiting => panic!("granted while held: {got:?}"),
            () = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
    }
    // Then past two re-checks, so that the waiter sits in its wait (not in
    // its first check, which would find the key free without waiting).
    let settled = Instant::now() + Duration::from_millis(500);
    tokio::select! {
        got = &mut waiting => panic!("granted while held: {got:?}"),
        () = tokio::time::sleep_until(settled.into()) => {}
    }
    guard.release().await.unwrap();
    let next = tokio::time::timeout(limit, waiting)
        .await
        .expect("the re-check hands the lock over")
        .unwrap();
    next.release().await.unwrap();
}

#[tokio::test]
async fn without_listen_url_waits_end_at_the_recheck_and_the_log_says_so_once() {
    let warnings = ListenWarnings::default();
    let _logging =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(warnings.clone()));
    let (bouncer, server) = bouncer().await;
    let namespace = unique("bounced");
    // ttl 600 ms: a re-check every 200 ms.
    let url = with_query(&bouncer.url(), &format!("namespace={namespace}&ttl=600ms"));
    let (a, b) = (
        open_store::<PgStore>(&url).await.unwrap(),
        open_store::<PgStore>(&url).await.unwrap(),
    );
    // Only `b` waits: each of its waits misses a notification.
    for _ in 0..5 {
        hand_over(&a, &b, server, &namespace, Duration::from_secs(5)).await;
    }
    let warnings = warnings.0.lock().unwrap().clone();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
}
