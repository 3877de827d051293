//! The metrics lock-core records, read back from a recording recorder
//! after one scripted scenario (acquire, contend, time out, lose, renew,
//! release, a store error) on the memory store and on Redis. Each run
//! uses its own namespace, which every metric carries as a label.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use distlock::telemetry as names;
use distlock::{LockOptions, Locker};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::redis::shared_redis_url;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

const TTL: Duration = Duration::from_secs(1);

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in this test binary");
        snapshotter
    })
}

type Labels = Vec<(String, String)>;

/// Everything recorded so far, by metric name and labels: a counter's
/// count, a gauge's value, a histogram's number of samples. (A snapshot
/// of the recorder gives what changed since the previous one.)
fn recorded() -> &'static Mutex<HashMap<(String, Labels), f64>> {
    static RECORDED: OnceLock<Mutex<HashMap<(String, Labels), f64>>> = OnceLock::new();
    RECORDED.get_or_init(Mutex::default)
}

/// The metrics of one store and namespace, as (name, labels other than
/// store and namespace, value).
#[derive(Debug)]
struct Seen(Vec<(String, Labels, f64)>);

impl Seen {
    fn take(namespace: &str, store: &str) -> Seen {
        let mut recorded = recorded().lock().unwrap();
        for (key, _, _, value) in snapshotter().snapshot().into_vec() {
            let key = key.key();
            let mut labels: Labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            let change = match value {
                DebugValue::Counter(c) => c as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(h) => h.len() as f64,
            };
            *recorded.entry((key.name().to_owned(), labels)).or_default() += change;
        }
        let rows = recorded
            .iter()
            .filter_map(|((name, labels), value)| {
                let ours = labels.contains(&("namespace".into(), namespace.into()))
                    && labels.contains(&("store".into(), store.into()));
                let rest = labels
                    .iter()
                    .filter(|(k, _)| k != "namespace" && k != "store")
                    .cloned()
                    .collect();
                ours.then(|| (name.clone(), rest, *value))
            })
            .collect();
        Seen(rows)
    }

    /// The value of `name` with exactly these `labels`.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let mut want: Labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        want.sort();
        self.0
            .iter()
            .filter(|(n, l, _)| n == name && *l == want)
            .map(|(_, _, value)| value)
            .sum()
    }
}

/// The scenario, on two lockers of one store in `namespace`.
async fn scenario(a: &Locker, b: &Locker, namespace: &str, store: &str) {
    snapshotter();
    let lock = [("kind", "lock")];
    // Acquire, and contend until the wait runs out.
    let held = a.lock("k").await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.lock_with("k", LockOptions::new().wait(Duration::from_millis(1500)))
                .await
        }
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while Seen::take(namespace, store).get(names::WAITERS, &lock) < 1.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiter never showed: {:?}",
            Seen::take(namespace, store)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(waiter.await.unwrap().unwrap_err().is_timeout());
    assert!(b.try_lock("k").await.unwrap().is_none());
    // Held past a renewal, then released.
    tokio::time::sleep(TTL / 2).await;
    held.release().await.unwrap();
    // A lease nobody renews is lost at its end.
    let unrenewed = a
        .lock_with("lost", LockOptions::new().auto_renew(false))
        .await
        .unwrap();
    tokio::time::timeout(TTL * 5, unrenewed.lost())
        .await
        .unwrap();
    // A read lock is counted under its own kind.
    let reader = b.rwlock("rw").unwrap().read().await.unwrap();
    reader.release().await.unwrap();

    let seen = Seen::take(namespace, store);
    let with = |extra: (&'static str, &'static str)| [("kind", "lock"), extra];
    assert_eq!(seen.get(names::ACQUISITIONS_TOTAL, &lock), 2.0, "{seen:?}");
    assert_eq!(seen.get(names::RELEASES_TOTAL, &lock), 1.0, "{seen:?}");
    assert_eq!(
        seen.get(names::LOSSES_TOTAL, &with(("reason", "validity_expired"))),
        1.0,
        "{seen:?}"
    );
    let waits = |outcome| seen.get(names::ACQUIRE_WAIT_SECONDS, &with(("outcome", outcome)));
    assert_eq!(waits("acquired"), 2.0, "{seen:?}");
    assert_eq!(waits("timeout"), 2.0, "{seen:?}");
    assert_eq!(waits("error"), 0.0, "{seen:?}");
    assert_eq!(seen.get(names::HOLD_SECONDS, &lock), 2.0, "{seen:?}");
    assert!(
        seen.get(names::RENEWALS_TOTAL, &with(("result", "ok"))) >= 1.0,
        "{seen:?}"
    );
    assert_eq!(seen.get(names::LOCKS_HELD, &lock), 0.0, "{seen:?}");
    assert_eq!(seen.get(names::WAITERS, &lock), 0.0, "{seen:?}");
    let read = [("kind", "read")];
    assert_eq!(seen.get(names::ACQUISITIONS_TOTAL, &read), 1.0, "{seen:?}");
    assert_eq!(seen.get(names::RELEASES_TOTAL, &read), 1.0, "{seen:?}");
    for row in &seen.0 {
        assert!(
            row.1.iter().all(|(k, _)| k != "key"),
            "a key became a label: {row:?}"
        );
    }
}

/// Runs [`scenario`] on two lockers of `url` (in `namespace`, of
/// `backend`).
async fn scenario_at(url: &str, namespace: &str, backend: &str) {
    let a = distlock::connect(url).await.unwrap();
    let b = distlock::connect(url).await.unwrap();
    scenario(&a, &b, namespace, backend).await;
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", fastrand::u32(..))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_store_reports_every_metric() {
    let namespace = unique("metrics-mem");
    let url = format!("mem://{namespace}?ttl=1s&namespace={namespace}");
    scenario_at(&url, &namespace, "mem").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_reports_every_metric_and_its_errors() {
    let base = shared_redis_url().await.expect("redis server");
    let namespace = unique("metrics-redis");
    scenario_at(
        &format!("{base}?ttl=1s&namespace={namespace}"),
        &namespace,
        "redis",
    )
    .await;

    // A store that cannot be reached: counted as a store error.
    let target = base
        .trim_start_matches("redis://")
        .split(['/', '?'])
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let proxy = FaultProxy::start(target).unwrap();
    let cut = format!(
        "redis://{}?ttl=1s&namespace={namespace}&connect_timeout=300ms&response_timeout=300ms",
        proxy.addr()
    );
    let cut = distlock::connect(&cut).await.unwrap();
    proxy.cut();
    let failed = cut.try_lock("unreachable").await;
    assert!(failed.is_err(), "{failed:?}");
    let seen = Seen::take(&namespace, "redis");
    let lock = [("kind", "lock"), ("error", "unavailable")];
    assert!(
        seen.get(names::STORE_ERRORS_TOTAL, &lock) >= 1.0,
        "{seen:?}"
    );
    let error = [("kind", "lock"), ("outcome", "error")];
    assert_eq!(
        seen.get(names::ACQUIRE_WAIT_SECONDS, &error),
        1.0,
        "{seen:?}"
    );
}
