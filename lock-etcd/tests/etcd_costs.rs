//! What locks cost on etcd, from etcd's own metrics. Holding: lease
//! renewals per second and this process's memory, with 1 and with 10 000
//! locks held through one locker; the numbers are printed (see them with
//! `--nocapture`) and renewal traffic must not grow with the number of
//! locks: they all hang on one session lease. Waiting: hand-offs between
//! the same lockers reuse their watches instead of creating one per wait.

mod common;
#[path = "common/metrics.rs"]
mod metrics;
#[path = "common/servers.rs"]
mod servers;

use std::time::{Duration, Instant};

use common::connect;
use distlock_testkit::Server;
use lock_core::{LockGuard, Locker};
use metrics::metric;
use servers::{single_member, url_for};

/// Renewals etcd's leader has seen.
async fn renewals(server: &Server) -> u64 {
    metric(server, "etcd_debugging_lease_renewed_total ").await
}

/// This process's resident memory, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap();
    kib * 1024
}

/// Takes `n` distinct locks with 32 tasks on one locker.
async fn hold(locker: &Locker, n: usize) -> Vec<LockGuard> {
    const TASKS: usize = 32;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let locker = locker.clone();
        tasks.push(tokio::spawn(async move {
            let mut guards = Vec::new();
            for i in (t..n).step_by(TASKS) {
                guards.push(locker.lock(&format!("held/{i}")).await.unwrap());
            }
            guards
        }));
    }
    let mut guards = Vec::with_capacity(n);
    for task in tasks {
        guards.extend(task.await.unwrap());
    }
    guards
}

struct Cost {
    renewals_per_second: f64,
    bytes_per_lock: f64,
    took: Duration,
}

/// Holds `n` locks for `window` and reports what it cost.
async fn cost_of(server: &Server, n: usize, window: Duration) -> Cost {
    let url = url_for([server.addr()], "3s", &format!("costs-{n}"));
    let locker = connect(&url).await.unwrap();
    // The first lock grants the session lease; count memory after it.
    let first = locker.lock("first").await.unwrap();
    let memory_before = rss();
    let started = Instant::now();
    let guards = hold(&locker, n).await;
    let took = started.elapsed();
    let memory_after = rss();
    let before = renewals(server).await;
    tokio::time::sleep(window).await;
    let renewed = renewals(server).await - before;
    assert!(guards.iter().all(LockGuard::is_held) && first.is_held());
    drop(guards);
    Cost {
        renewals_per_second: renewed as f64 / window.as_secs_f64(),
        bytes_per_lock: memory_after.saturating_sub(memory_before) as f64 / n as f64,
        took,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_traffic_does_not_grow_with_held_locks() {
    let server = single_member("etcd-costs").await;
    let window = Duration::from_secs(6);
    let one = cost_of(&server, 1, window).await;
    let many = cost_of(&server, 10_000, window).await;
    println!(
        "etcd, ttl 3s: holding 1 lock: {:.2} renewals/s; holding 10000 locks: {:.2} renewals/s, \
         ~{:.0} bytes of client memory per held lock, taken in {:?}",
        one.renewals_per_second, many.renewals_per_second, many.bytes_per_lock, many.took
    );
    // One keepalive every ttl/3 = 1 s, whatever the number of locks.
    assert!(
        many.renewals_per_second <= one.renewals_per_second * 1.5 + 0.5,
        "renewals grew with the number of held locks"
    );
}

/// Watch requests (creations and cancellations) etcd received.
async fn watch_requests(server: &Server) -> u64 {
    metric(
        server,
        r#"grpc_server_msg_received_total{grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"} "#,
    )
    .await
}

/// A watch created while the queue is being written to can land in etcd's
/// slow "unsynced" group (up to 100 ms late), so waiters must not create
/// one per wait: two lockers taking turns on one key 100 times reuse the
/// watch on each other's entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_offs_between_the_same_lockers_reuse_their_watches() {
    const TURNS: usize = 100;
    let server = single_member("etcd-watch-reuse").await;
    let url = url_for([server.addr()], "3s", "watch-reuse");
    let a = connect(&url).await.unwrap();
    let b = connect(&url).await.unwrap();
    let before = watch_requests(&server).await;
    let mut holding = a.lock("k").await.unwrap();
    let next = [b, a];
    for turn in 0..TURNS {
        let waiter = next[turn % 2].clone();
        let waiting = tokio::spawn(async move { waiter.lock("k").await });
        // Let the waiter queue behind the holder (either order is correct;
        // this makes most turns real hand-offs).
        tokio::time::sleep(Duration::from_millis(2)).await;
        holding.release().await.unwrap();
        holding = waiting.await.unwrap().unwrap();
    }
    holding.release().await.unwrap();
    let requests = watch_requests(&server).await - before;
    println!("etcd: {TURNS} hand-offs between two lockers sent {requests} watch requests");
    // A watch per wait would be TURNS creations and as many cancellations.
    assert!(
        requests <= 10,
        "{requests} watch requests for {TURNS} hand-offs: waits create watches"
    );
}
