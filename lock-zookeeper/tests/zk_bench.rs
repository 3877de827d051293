//! ZooKeeper lock benchmarks, each against the floor measured in the same
//! run: the same client library making the raw requests of one
//! lock+release (create EPHEMERAL_SEQUENTIAL + delete), see
//! [`RawSession`].
//!
//! Ignored by default (they take a minute and want an optimized build):
//!
//! ```text
//! cargo test --release -p lock-zookeeper --test zk_bench -- --ignored --nocapture --test-threads=1
//! ```

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_testkit::layout::zk_lock_dir;
use distlock_testkit::probe::tcp_request;
use distlock_testkit::zookeeper::{raw_client, standalone_spec, zk_url};
use distlock_testkit::Server;
use lock_core::Locker;
use tokio::sync::Barrier;
use zookeeper_client::{Acls, CreateMode};

const CLIENTS: usize = 16;
const KEYS: usize = 1000;
const THROUGHPUT_RUN: Duration = Duration::from_secs(5);

async fn server() -> Server {
    standalone_spec().unwrap().start().await.unwrap()
}

async fn locker(server: &Server, namespace: &str) -> Locker {
    let url = zk_url(
        &[server.addr()],
        BASE,
        &format!("ttl=10s&namespace={namespace}"),
    );
    common::connect(&url).await.unwrap()
}

/// The base path of the benchmark lockers.
const BASE: &str = "/bench";

/// A ZooKeeper session of its own making raw requests, with none of
/// distlock's machinery: the floor and the bare lock recipe.
struct RawSession {
    client: zookeeper_client::Client,
}

impl RawSession {
    /// What the floor does: the requests every ZooKeeper lock recipe makes
    /// at least for one uncontended lock+release.
    const FLOOR: &'static str = "create EPHEMERAL_SEQUENTIAL + delete";
    /// Where the bare recipe runs.
    const RECIPE_DIR: &'static str = "/bench/recipe";

    async fn open(server: &Server) -> Self {
        let client = raw_client(&[server.addr()]).await.unwrap();
        Self { client }
    }

    /// The contenders directory the floor uses for `key` of `locks`.
    fn floor_dir(locks: &Locker, key: &str) -> String {
        zk_lock_dir(BASE, &locks.name(key).unwrap())
    }

    /// The floor: one lock+release in `dir` (made on first use), an
    /// EPHEMERAL_SEQUENTIAL node created and deleted.
    async fn floor_once(&self, dir: &str) {
        let node = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let prefix = format!("{dir}/lock-floor-");
        let created = match self.client.create(&prefix, b"floor", &node).await {
            Err(zookeeper_client::Error::NoNode) => {
                let dirs = CreateMode::Container.with_acls(Acls::anyone_all());
                match self.client.mkdir(dir, &dirs).await {
                    // Another floor session may have made it meanwhile.
                    Ok(()) | Err(zookeeper_client::Error::NodeExists) => {}
                    Err(e) => panic!("create {dir}: {e}"),
                }
                self.client.create(&prefix, b"floor", &node).await
            }
            other => other,
        };
        let (_, sequence) = created.unwrap();
        self.client
            .delete(&format!("{prefix}{sequence}"), None)
            .await
            .unwrap();
    }

    /// Makes the directory of [`RawSession::recipe_once`].
    async fn make_recipe_dir(&self) {
        let dirs = CreateMode::Persistent.with_acls(Acls::anyone_all());
        self.client.mkdir(Self::RECIPE_DIR, &dirs).await.unwrap();
    }

    /// The bare requests of the lock recipe: the floor's create and
    /// delete, plus the listing (with a child watch) pipelined with the
    /// create that tells whether the new node is the lowest.
    async fn recipe_once(&self) {
        let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let prefix = format!("{}/lock-", Self::RECIPE_DIR);
        let create = self.client.create(&prefix, b"owner", &options);
        let listing = self.client.list_and_watch_children(Self::RECIPE_DIR);
        let (created, listed) = tokio::join!(create, listing);
        let (_, sequence) = created.unwrap();
        let (_, watcher) = listed.unwrap();
        self.client
            .delete(&format!("{prefix}{sequence}"), None)
            .await
            .unwrap();
        watcher.changed().await;
    }
}

/// Takes `key` and releases it at once.
async fn lock_release(locks: &Locker, key: &str) {
    locks.lock(key).await.unwrap().release().await.unwrap();
}

/// p50 and p99 of `samples`, in microseconds.
fn percentiles(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    (at(0.50), at(0.99))
}

fn jain(counts: &[u64]) -> f64 {
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let squares: f64 = counts.iter().map(|&c| (c as f64).powi(2)).sum();
    sum * sum / (counts.len() as f64 * squares)
}

/// Uncontended lock+release vs the floor, interleaved so both see the same
/// machine load; then the hand-off from `release()` returning to the next
/// waiter's `lock()` returning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn bench_latency() {
    const ROUNDS: usize = 3000;
    let server = server().await;
    let locks = locker(&server, "latency").await;
    let floor = RawSession::open(&server).await;
    let floor_dir = RawSession::floor_dir(&locks, "floor");
    let recipe = RawSession::open(&server).await;
    recipe.make_recipe_dir().await;
    let (mut ours, mut raw, mut listed) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS + 200 {
        // Rotate which goes first, so none always follows another.
        let mut took = [Duration::ZERO; 3];
        for turn in 0..3 {
            let which = (round + turn) % 3;
            let started = Instant::now();
            match which {
                0 => floor.floor_once(&floor_dir).await,
                1 => locks
                    .lock("uncontended")
                    .await
                    .unwrap()
                    .release()
                    .await
                    .unwrap(),
                _ => recipe.recipe_once().await,
            }
            took[which] = started.elapsed();
        }
        if round >= 200 {
            raw.push(took[0]);
            ours.push(took[1]);
            listed.push(took[2]);
        }
    }
    let (listed50, _) = percentiles(&mut listed);
    // The ratio per block of 500 rounds, then their median: robust against
    // bursts of load from other processes on a shared machine.
    let mut ratios: Vec<f64> = raw
        .chunks(500)
        .zip(ours.chunks(500))
        .map(|(raw, ours)| percentiles(&mut ours.to_vec()).0 / percentiles(&mut raw.to_vec()).0)
        .collect();
    ratios.sort_by(f64::total_cmp);
    let (floor50, floor99) = percentiles(&mut raw);
    let (ours50, ours99) = percentiles(&mut ours);
    println!(
        "floor ({}): p50 {floor50:.0} us, p99 {floor99:.0} us",
        RawSession::FLOOR
    );
    println!(
        "uncontended lock+release: p50 {ours50:.0} us ({:.2}x floor; per-block ratios {ratios:.2?}), p99 {ours99:.0} us",
        ours50 / floor50
    );

    println!(
        "raw recipe (create + pipelined list-and-watch + delete): p50 {listed50:.0} us ({:.2}x floor)",
        listed50 / floor50
    );
    let (holder, waiter) = (
        locker(&server, "handoff").await,
        locker(&server, "handoff").await,
    );
    let mut handoffs = Vec::new();
    for round in 0..600 {
        let guard = holder.lock("k").await.unwrap();
        let waiter = waiter.clone();
        let waiting = tokio::spawn(async move {
            let guard = waiter.lock("k").await.unwrap();
            let acquired_at = Instant::now();
            guard.release().await.unwrap();
            acquired_at
        });
        // Let the waiter queue up and watch its predecessor.
        tokio::time::sleep(Duration::from_millis(3)).await;
        guard.release().await.unwrap();
        let released_at = Instant::now();
        let acquired_at = waiting.await.unwrap();
        if round >= 100 {
            handoffs.push(acquired_at.saturating_duration_since(released_at));
        }
    }
    let (hand50, hand99) = percentiles(&mut handoffs);
    println!(
        "handoff: p50 {hand50:.0} us ({:.2}x floor), p99 {hand99:.0} us",
        hand50 / floor50
    );
}

/// Runs `CLIENTS` tasks for [`THROUGHPUT_RUN`], each calling `op(client,
/// iteration)` in a loop; returns each client's count.
async fn run_clients<C, F, Fut>(clients: Vec<C>, op: F) -> Vec<u64>
where
    C: Send + Sync + 'static,
    F: Fn(Arc<C>, u64) -> Fut + Send + Sync + Copy + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let barrier = Arc::new(Barrier::new(clients.len()));
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|client| {
            let (client, barrier) = (Arc::new(client), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let until = Instant::now() + THROUGHPUT_RUN;
                let mut count = 0;
                while Instant::now() < until {
                    op(client.clone(), count).await;
                    count += 1;
                }
                count
            })
        })
        .collect();
    let mut counts = Vec::new();
    for task in tasks {
        counts.push(task.await.unwrap());
    }
    counts
}

fn per_second(counts: &[u64]) -> f64 {
    counts.iter().sum::<u64>() as f64 / THROUGHPUT_RUN.as_secs_f64()
}

/// 16 clients, each with its own session, on one key and on 1,000 keys;
/// the many-keys rate against 16 floor probes doing the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn bench_throughput() {
    let server = server().await;
    let mut lockers = Vec::new();
    let clients: usize = std::env::var("ZK_BENCH_CLIENTS")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(CLIENTS);
    for _ in 0..clients {
        lockers.push(locker(&server, "throughput").await);
    }
    // A fresh server runs interpreted for its first ~10 s of load: warm it
    // up, unmeasured.
    for _ in 0..2 {
        run_clients(lockers.clone(), |locks, _| async move {
            lock_release(&locks, "warm-up").await;
        })
        .await;
    }
    let one_key = run_clients(lockers.clone(), |locks, _| async move {
        locks.lock("one").await.unwrap().release().await.unwrap();
    })
    .await;
    println!(
        "16 clients, 1 key: {:.0} acquisitions/s, fairness (Jain) {:.3}",
        per_second(&one_key),
        jain(&one_key)
    );

    let many = run_clients(lockers.clone(), |locks, _| async move {
        let key = format!("key-{}", fastrand::usize(..KEYS));
        locks.lock(&key).await.unwrap().release().await.unwrap();
    })
    .await;
    let mut floors: Vec<(RawSession, Vec<String>)> = Vec::new();
    for locks in &lockers {
        let dirs = (0..KEYS)
            .map(|k| RawSession::floor_dir(locks, &format!("floor-{k}")))
            .collect();
        floors.push((RawSession::open(&server).await, dirs));
    }
    let floor = run_clients(floors, |probe, _| async move {
        let (floor, dirs) = &*probe;
        floor.floor_once(&dirs[fastrand::usize(..KEYS)]).await;
    })
    .await;
    println!(
        "16 clients, {KEYS} keys: {:.0} acquisitions/s vs floor {:.0}/s ({:.2}x floor)",
        per_second(&many),
        per_second(&floor),
        per_second(&many) / per_second(&floor)
    );
}

/// Packets the server received, from `srvr`.
async fn server_received(server: &Server) -> u64 {
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, b"srvr")
        .await
        .unwrap();
    let mut text = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut text)
        .await
        .unwrap();
    let line = text.lines().find(|l| l.starts_with("Received:")).unwrap();
    line["Received:".len()..].trim().parse().unwrap()
}

/// Resident memory of this process, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Session traffic while holding no lock and 10,000 locks on one session:
/// the heartbeat is per session, so it must not grow with the locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn bench_holding_many_locks() {
    const HELD: usize = 10_000;
    const WINDOW: Duration = Duration::from_secs(5);
    let server = server().await;
    tcp_request(server.addr(), b"srvr", "Mode:").await.unwrap();
    let locks = locker(&server, "holding").await;
    lock_release(&locks, "warm-up").await;
    let rate = |before: u64, after: u64| (after - before) as f64 / WINDOW.as_secs_f64();

    let before = server_received(&server).await;
    tokio::time::sleep(WINDOW).await;
    let idle = rate(before, server_received(&server).await);

    let memory_before = rss();
    let started = Instant::now();
    let mut guards = Vec::with_capacity(HELD);
    for chunk in 0..HELD / 100 {
        let batch: Vec<_> = (0..100)
            .map(|i| {
                let locks = locks.clone();
                tokio::spawn(async move { locks.lock(&format!("held/{chunk}/{i}")).await.unwrap() })
            })
            .collect();
        for task in batch {
            guards.push(task.await.unwrap());
        }
    }
    let took = started.elapsed();
    let per_lock = rss().saturating_sub(memory_before) / HELD as u64;
    // Let the last acquisitions' requests finish before counting.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let before = server_received(&server).await;
    tokio::time::sleep(WINDOW).await;
    let holding = rate(before, server_received(&server).await);
    assert!(guards.iter().all(|g| g.is_held()));
    for guard in guards {
        guard.release().await.unwrap();
    }
    println!(
        "took {HELD} locks in {took:?} ({:.0}/s)",
        HELD as f64 / took.as_secs_f64()
    );
    println!(
        "session traffic: {idle:.1} packets/s holding no lock, {holding:.1} packets/s holding {HELD}; ~{per_lock} bytes of client memory per held lock"
    );
}
