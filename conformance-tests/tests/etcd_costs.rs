//! What holding many locks costs on etcd: lease renewals per second (from
//! etcd's own metrics) and this process's memory, with 1 and with 10 000
//! locks held through one locker. Prints the numbers (see them with
//! `--nocapture`) and checks that renewal traffic does not grow with the
//! number of locks: they all hang on one session lease.

use std::time::{Duration, Instant};

use conformance_tests::etcd::{etcd_spec, etcd_url, TEST_TIMEOUTS};
use conformance_tests::harness::Server;
use distlock::{LockGuard, Locker};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Renewals etcd's leader has seen, from `GET /metrics`.
async fn renewals(server: &Server) -> u64 {
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix("etcd_debugging_lease_renewed_total "))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map(|value| value as u64)
        .expect("etcd_debugging_lease_renewed_total in /metrics")
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
    let url = format!(
        "{}?ttl=3s&namespace=costs-{n}&{TEST_TIMEOUTS}",
        etcd_url([server.addr()])
    );
    let locker = distlock::connect(&url).await.unwrap();
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
    let server = etcd_spec("etcd-costs", false)
        .unwrap()
        .start()
        .await
        .unwrap();
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
