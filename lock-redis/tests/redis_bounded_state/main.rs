//! What Redis keeps is bounded by a constant, not by the number of names
//! ever locked: after 10,000 distinct names were locked and released (plain
//! locks, read locks, semaphore permits, elections, hand-offs to waiters),
//! a namespace keeps its fencing counter and nothing else — one key on one
//! server, on a Sentinel master and on each Redlock master, at most one
//! per slot its names hash to on a cluster — while tokens still rise for
//! every name across the other names of its counter. `purge_namespace`
//! leaves nothing of its namespace and spares the others.

#[path = "../common/mod.rs"]
mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{connect, raw_connection};
use distlock_testkit::layout::RedisKeys;
use distlock_testkit::redis::{
    redlock_url, shared_cluster_url, shared_redis_url, shared_redlock_servers,
};
use distlock_testkit::redis_sentinel::shared_sentinel_group;
use distlock_testkit::{eventually, with_query};
use futures_util::stream::{self, StreamExt};
use lock_core::{FencingToken, LockOptions, Locker, LossReason};
use lock_redis::RedisStore;
use redis::cluster_routing::{Route, SlotAddr};

/// How many distinct names the churn locks and releases.
const NAMES: usize = 10_000;
/// How many of them are in flight at once.
const IN_FLIGHT: usize = 32;
/// How many names of the hand-off share get a waiter in line.
const HAND_OFFS: usize = 100;
/// How many keys of a namespace of their own the purge tests write first.
const FILLER: usize = 3_000;
/// The number of Redis Cluster hash slots.
const SLOTS: usize = 16_384;
/// Timeouts for a busy machine: the churn keeps many calls in flight
/// while other tests of this binary churn other deployments. (A cluster
/// client tries a command again after a response timeout: a release
/// whose first run was only slow then finds the lock gone and reports
/// it lost.)
const TIMEOUTS: &str = "connect_timeout=2s&response_timeout=5s";

/// A Redis deployment under test and the servers that keep its keys.
struct Deployment {
    /// Its URL, without options.
    url: String,
    /// The `redis://` URL of every master: where a namespace's keys are
    /// counted.
    masters: Vec<String>,
    cluster: bool,
    redlock: bool,
}

impl Deployment {
    async fn single() -> Self {
        // Perhaps the server `DISTLOCK_TEST_REDIS_URL` names.
        let url = shared_redis_url().await.unwrap();
        Self::new(url.clone(), vec![url], false, false)
    }

    async fn cluster() -> Self {
        let url = shared_cluster_url().await.unwrap();
        let hosts = url.trim_start_matches("redis+cluster://");
        let masters = hosts.split(',').map(|h| format!("redis://{h}")).collect();
        Self::new(url, masters, true, false)
    }

    async fn sentinel() -> Self {
        let group = shared_sentinel_group().await.unwrap();
        let master = group.master_addr().await.unwrap();
        Self::new(group.url(), vec![format!("redis://{master}")], false, false)
    }

    async fn redlock() -> Self {
        let servers = shared_redlock_servers(3).await.unwrap();
        let url = redlock_url(servers.iter().map(|s| s.addr()));
        let masters = servers.iter().map(|s| format!("redis://{}", s.addr()));
        Self::new(url, masters.collect(), false, true)
    }

    fn new(url: String, masters: Vec<String>, cluster: bool, redlock: bool) -> Self {
        Self {
            url,
            masters,
            cluster,
            redlock,
        }
    }

    /// A locker in `namespace` with leases of `ttl`.
    async fn locker(&self, namespace: &str, ttl: &str) -> Locker {
        let query = format!("namespace={namespace}&ttl={ttl}&{TIMEOUTS}");
        connect(&with_query(&self.url, &query)).await.unwrap()
    }

    /// A raw connection that routes keyed commands as the store does.
    async fn raw(&self) -> Raw {
        if self.cluster {
            let config = lock_core::open::parse::<RedisStore>(&self.url)
                .unwrap()
                .config;
            Raw::Cluster(config.cluster_connection().await.unwrap())
        } else {
            Raw::Server(raw_connection(&self.masters[0]).await)
        }
    }

    /// Every key of `namespace` on each master, with its PTTL (-1: none).
    async fn keys_of(&self, namespace: &str) -> Vec<Vec<(String, i64)>> {
        let mut per_master = Vec::new();
        for master in &self.masters {
            per_master.push(scan(master, namespace).await);
        }
        per_master
    }
}

/// Every key of `namespace` on the server at `url`, with its PTTL.
async fn scan(url: &str, namespace: &str) -> Vec<(String, i64)> {
    let mut raw = raw_connection(url).await;
    let pattern = format!("distlock:{{{namespace}:*");
    let mut found = Vec::new();
    let mut cursor = String::from("0");
    loop {
        let (next, keys): (String, Vec<String>) = redis::cmd("SCAN")
            .arg(&cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut raw)
            .await
            .unwrap();
        for key in keys {
            let pttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut raw)
                .await
                .unwrap();
            found.push((key, pttl));
        }
        if next == "0" {
            return found;
        }
        cursor = next;
    }
}

/// Keyed access to a deployment from outside distlock.
#[derive(Clone)]
enum Raw {
    Server(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Raw {
    async fn exists(&mut self, key: &str) -> bool {
        let cmd = redis::cmd("EXISTS").arg(key).clone();
        let found: i64 = match self {
            Raw::Server(c) => cmd.query_async(c).await.unwrap(),
            Raw::Cluster(c) => cmd.query_async(c).await.unwrap(),
        };
        found == 1
    }

    async fn set(&mut self, key: &str) {
        let cmd = redis::cmd("SET").arg(key).arg("x").clone();
        let () = match self {
            Raw::Server(c) => cmd.query_async(c).await.unwrap(),
            Raw::Cluster(c) => cmd.query_async(c).await.unwrap(),
        };
    }
}

/// What one name of the churn does, by its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Share {
    Plain,
    Read,
    Permit,
    Election,
    LockHandOff,
    PermitHandOff,
}

fn share(i: usize, redlock: bool) -> Share {
    match (i % 10, redlock) {
        (6, false) => Share::Read,
        (7, false) => Share::Permit,
        (8, _) => Share::Election,
        (9, _) if i / 10 < HAND_OFFS => Share::LockHandOff,
        (9, false) if i / 10 < 2 * HAND_OFFS => Share::PermitHandOff,
        _ => Share::Plain,
    }
}

/// Takes and gives back one hold of name `n` as `share` says; `raw`
/// looks at the waiters' line (none on Redlock).
async fn use_once(lockers: &[Locker; 2], raw: Option<Raw>, n: &str, share: Share) {
    let [a, b] = lockers;
    match share {
        Share::Plain => a.lock(n).await.unwrap().release().await.unwrap(),
        Share::Read => {
            let rw = a.rwlock(n).unwrap();
            rw.read().await.unwrap().release().await.unwrap();
        }
        Share::Permit => {
            let sem = a.semaphore(n, 2).unwrap();
            sem.acquire().await.unwrap().release().await.unwrap();
        }
        Share::Election => {
            let election = a.election(n).unwrap();
            election
                .campaign("me")
                .await
                .unwrap()
                .resign()
                .await
                .unwrap();
        }
        Share::LockHandOff | Share::PermitHandOff => hand_off(raw, a, b, n, share).await,
    }
}

/// `a` holds `n` (its lock, or the one permit of its semaphore), `b`
/// waits for it, and once `b` stands in line (seen through `raw`) `a`
/// gives it back: `b` is handed the hold and releases it. Redlock keeps
/// no line (`raw` is `None`): there `a` releases at once.
async fn hand_off(raw: Option<Raw>, a: &Locker, b: &Locker, n: &str, share: Share) {
    let wait = LockOptions::new().wait(Duration::from_secs(20));
    let permit = share == Share::PermitHandOff;
    let held = match permit {
        true => a.semaphore(n, 1).unwrap().acquire().await.unwrap(),
        false => a.lock(n).await.unwrap(),
    };
    let waiting = {
        let (b, n) = (b.clone(), n.to_owned());
        tokio::spawn(async move {
            match permit {
                true => b.semaphore(&n, 1).unwrap().acquire_with(wait).await,
                false => b.lock_with(&n, wait).await,
            }
        })
    };
    if let Some(raw) = raw {
        let suffix = if permit { ":permitqueue" } else { ":queue" };
        let line = format!("{}{suffix}", RedisKeys::of(&a.name(n).unwrap()).lock);
        eventually(Duration::from_secs(10), "a waiter in line", || {
            let (mut raw, line) = (raw.clone(), &line);
            async move {
                let queued = raw.exists(line).await;
                queued.then_some(()).ok_or("nobody in line yet")
            }
        })
        .await
        .unwrap();
    }
    held.release().await.unwrap();
    let next = waiting.await.unwrap().expect("the waiter got the hold");
    next.release().await.unwrap();
}

/// Locks and releases [`NAMES`] distinct names in `namespace`, each once,
/// in the shares [`share`] gives; returns the names.
async fn churn(d: &Deployment, namespace: &str) -> Vec<String> {
    let lockers = [
        d.locker(namespace, "10s").await,
        d.locker(namespace, "10s").await,
    ];
    let raw = match d.redlock {
        true => None,
        false => Some(d.raw().await),
    };
    let names: Vec<String> = (0..NAMES).map(|i| format!("order/{i}")).collect();
    let done: Vec<()> = stream::iter(names.iter().enumerate())
        .map(|(i, n)| use_once(&lockers, raw.clone(), n, share(i, d.redlock)))
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    assert_eq!(done.len(), NAMES);
    names
}

/// The cluster slot of `name`'s lock in `namespace`.
fn slot(namespace: &str, name: &str) -> Route {
    Route::with_key(format!("distlock:{{{namespace}:{name}}}"), SlotAddr::Master)
}

/// Asserts that every key left in `namespace` is a fencing counter that
/// never expires, and that their number is within the bound: one per
/// master off a cluster; on a cluster at most one per slot the names hit.
async fn only_counters_left(d: &Deployment, namespace: &str, names: &[String]) {
    let per_master = d.keys_of(namespace).await;
    let mut total = 0;
    for (addr, keys) in d.masters.iter().zip(&per_master) {
        for (key, pttl) in keys {
            let counter = if d.cluster {
                key.starts_with(&format!("distlock:{{{namespace}:%c")) && key.ends_with("}:token")
            } else {
                *key == format!("distlock:{{{namespace}:}}:token")
            };
            assert!(counter, "{key} left on {addr}");
            assert_eq!(*pttl, -1, "the counter {key} expires");
        }
        if !d.cluster {
            assert_eq!(keys.len(), 1, "keys on {addr}: {keys:?}");
        }
        total += keys.len();
    }
    if d.cluster {
        let slots: HashSet<Route> = names.iter().map(|n| slot(namespace, n)).collect();
        assert!((1..=SLOTS).contains(&total), "{total} counters");
        assert!(
            total <= slots.len(),
            "{total} counters for {} slots",
            slots.len()
        );
        println!(
            "{total} counters for {NAMES} names in {} slots",
            slots.len()
        );
    }
}

/// Names that share `name`'s counter: on a cluster the names of its slot,
/// elsewhere any.
fn siblings(d: &Deployment, namespace: &str, name: &str, n: usize) -> Vec<String> {
    let own = slot(namespace, name);
    (0..)
        .map(|j| format!("{name}/sibling/{j}"))
        .filter(|s| !d.cluster || slot(namespace, s) == own)
        .take(n)
        .collect()
}

/// For a few names: its token, then those of three names sharing its
/// counter, then its token again. Each is larger than the one before
/// (tokens rise per name, and the counter is shared).
async fn tokens_rise_across_a_shared_counter(d: &Deployment, namespace: &str) {
    let locker = d.locker(namespace, "10s").await;
    let probes = (0..20).map(|i| {
        let locker = locker.clone();
        async move {
            let probe = format!("probe/{i}");
            let take = |name: String| {
                let locker = locker.clone();
                async move {
                    let guard = locker.lock(&name).await.unwrap();
                    let token = guard.token();
                    guard.release().await.unwrap();
                    token
                }
            };
            let mut tokens: Vec<FencingToken> = vec![take(probe.clone()).await];
            for sibling in siblings(d, namespace, &probe, 3) {
                tokens.push(take(sibling).await);
            }
            tokens.push(take(probe.clone()).await);
            assert!(
                tokens.windows(2).all(|w| w[0] < w[1]),
                "{probe}: tokens {tokens:?}"
            );
        }
    });
    futures_util::future::join_all(probes).await;
}

async fn bounded(d: Deployment, namespace: &str) {
    let names = churn(&d, namespace).await;
    only_counters_left(&d, namespace, &names).await;
    tokens_rise_across_a_shared_counter(&d, namespace).await;
    let probed: Vec<String> = names
        .into_iter()
        .chain((0..20).map(|i| format!("probe/{i}")))
        .collect();
    only_counters_left(&d, namespace, &probed).await;
}

/// One test per deployment, each running `scenario` on it in a
/// namespace of its own: `test => Deployment::<constructor>, "namespace";`.
macro_rules! on_each_deployment {
    ($scenario:ident { $($test:ident => $deployment:ident, $namespace:literal;)+ }) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                $scenario(Deployment::$deployment().await, $namespace).await;
            }
        )+
    };
}

on_each_deployment!(bounded {
    one_server_keeps_one_counter_per_namespace => single, "bounded-single";
    a_cluster_keeps_at_most_one_counter_per_slot => cluster, "bounded-cluster";
    a_sentinel_master_keeps_one_counter_per_namespace => sentinel, "bounded-sentinel";
    each_redlock_master_keeps_one_counter_per_namespace => redlock, "bounded-redlock";
});

/// A watch leaves its marker, which expires: nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_watch_leaves_only_a_marker_that_expires() {
    for d in [Deployment::single().await, Deployment::cluster().await] {
        let namespace = format!("bounded-watch-{}", d.cluster);
        let locker = d.locker(&namespace, "10s").await;
        for i in 0..5 {
            let name = format!("watched/{i}");
            let mut watch = locker.watch(&name).unwrap();
            assert!(watch.changed().await.is_none(), "free");
            let guard = locker.lock(&name).await.unwrap();
            assert!(watch.changed().await.is_some(), "held");
            guard.release().await.unwrap();
        }
        let mut markers = 0;
        for (key, pttl) in d.keys_of(&namespace).await.concat() {
            if key.ends_with("}:token") {
                continue;
            }
            assert!(key.ends_with(":watched"), "{key} left");
            assert!((1..=30_000).contains(&pttl), "{key} expires in {pttl} ms");
            markers += 1;
        }
        assert_eq!(markers, 5, "a marker per watched name, until it expires");
    }
}

mod purge;
