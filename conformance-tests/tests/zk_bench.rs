//! ZooKeeper lock benchmarks against issue 5's targets, each against the
//! floor measured in the same run: the same client library making the raw
//! requests of one lock+release (create EPHEMERAL_SEQUENTIAL + delete).
//!
//! Ignored by default (they take a minute and want an optimized build):
//!
//! ```text
//! cargo test --release -p conformance-tests --test zk_bench -- --ignored --nocapture --test-threads=1
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use conformance_tests::harness::probe::tcp_request;
use conformance_tests::harness::Server;
use conformance_tests::zookeeper::{standalone_spec, zk_url};
use distlock::{FloorProbe, LockName, Locker};
use tokio::sync::Barrier;

const CLIENTS: usize = 16;
const KEYS: usize = 1000;
const THROUGHPUT_RUN: Duration = Duration::from_secs(5);

async fn server() -> Server {
    standalone_spec().unwrap().start().await.unwrap()
}

async fn locker(server: &Server, namespace: &str) -> Locker {
    let url = zk_url(
        &[server.addr()],
        "/bench",
        &format!("ttl=10s&namespace={namespace}"),
    );
    distlock::connect(&url).await.unwrap()
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
    let floor = locks.floor_probe().await.unwrap().unwrap();
    let name = locks.name("floor").unwrap();
    let recipe = RecipeProbe::open(&server).await;
    let (mut ours, mut raw, mut listed) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS + 200 {
        // Rotate which goes first, so none always follows another.
        let mut took = [Duration::ZERO; 3];
        for turn in 0..3 {
            let which = (round + turn) % 3;
            let started = Instant::now();
            match which {
                0 => floor.lock_release_once(&name).await.unwrap(),
                1 => locks
                    .lock("uncontended")
                    .await
                    .unwrap()
                    .release()
                    .await
                    .unwrap(),
                _ => recipe.lock_release_once().await,
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
        floor.describe()
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

/// The bare requests of the lock recipe on a raw client: the floor's
/// create and delete, plus the listing (with a child watch) pipelined with
/// the create that tells whether the new node is the lowest.
struct RecipeProbe {
    client: zookeeper_client::Client,
}

impl RecipeProbe {
    const DIR: &'static str = "/bench/recipe";

    async fn open(server: &Server) -> Self {
        let client = zookeeper_client::Client::connect(&server.addr().to_string())
            .await
            .unwrap();
        let dirs = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all());
        client.mkdir(Self::DIR, &dirs).await.unwrap();
        Self { client }
    }

    async fn lock_release_once(&self) {
        let options = zookeeper_client::CreateMode::EphemeralSequential
            .with_acls(zookeeper_client::Acls::anyone_all());
        let prefix = format!("{}/lock-", Self::DIR);
        let create = self.client.create(&prefix, b"owner", &options);
        let listing = self.client.list_and_watch_children(Self::DIR);
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
    // A fresh server runs interpreted for its first ~10 s of load (see
    // BENCHMARKS.md, 2026-11-23): warm it up, unmeasured.
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
    let mut floors: Vec<(Box<dyn FloorProbe>, Vec<LockName>)> = Vec::new();
    for locks in &lockers {
        let names = (0..KEYS)
            .map(|k| locks.name(&format!("floor-{k}")).unwrap())
            .collect();
        floors.push((locks.floor_probe().await.unwrap().unwrap(), names));
    }
    let floor = run_clients(floors, |probe, _| async move {
        let (probe, names) = &*probe;
        probe
            .lock_release_once(&names[fastrand::usize(..KEYS)])
            .await
            .unwrap();
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
