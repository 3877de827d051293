//! Fault tests for Redis locks on dedicated `redis-server` processes:
//! server killed and restarted, holder process killed or frozen, network
//! cut and slowed down through a fault proxy. (Acquisitions whose reply
//! was lost: `tests/redis_lost_reply.rs`.)
//!
//! A "holder process" is this test binary run again with
//! `HOLDER_URL_VAR` set: the `holder_process_helper` test then takes the
//! lock and reports on stdout (see [`holder_process_helper`]).

mod common;

use std::time::{Duration, Instant};

use common::helper::{helper_locker, Helper};
use common::{connect, server_url, start};
use distlock_testkit::redis::redis_spec;
use distlock_testkit::scenarios::{freed_after_kill, FreedWithin};
use distlock_testkit::{FaultProxy, FencedResource, Server};
use lock_core::{LockError, LockGuard, LockOptions, Locker};

const HOLDER_URL_VAR: &str = "DISTLOCK_TEST_HOLDER_URL";
const TTL: Duration = Duration::from_secs(1);
const SLACK: Duration = Duration::from_secs(3);

async fn server(name: &str) -> Server {
    start(redis_spec(name)).await
}

async fn locker(addr: impl std::fmt::Display, namespace: &str) -> Locker {
    connect(&server_url(addr, namespace, TTL)).await.unwrap()
}

/// Retries `try_lock` while the store is unavailable, until `limit`.
async fn try_lock_when_back(
    locker: &Locker,
    key: &str,
    limit: Duration,
) -> Result<Option<LockGuard>, LockError> {
    let deadline = Instant::now() + limit;
    loop {
        match locker.try_lock(key).await {
            Err(e) if e.is_retriable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            other => return other,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_and_restarted_while_held_reports_lost_then_recovers() {
    let server = server("redis-restart").await;
    let locker = locker(server.addr(), "restart").await;
    let guard = locker.lock("k").await.unwrap();
    server.stop().expect("it was running");
    let reason = tokio::time::timeout(TTL + SLACK, guard.lost())
        .await
        .expect("the loss was not signalled");
    assert!(!guard.is_held(), "{reason}");
    server.restart().await.unwrap();
    // Without persistence the restarted server has no lock: free for anyone,
    // and the same locker works again.
    let again = try_lock_when_back(&locker, "k", Duration::from_secs(15))
        .await
        .unwrap();
    let again = again.expect("the restarted server still holds the lock");
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_blackhole_signals_loss_before_another_client_acquires() {
    let server = server("redis-blackhole").await;
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let holder = locker(proxy.addr(), "blackhole").await;
    let other = locker(server.addr(), "blackhole").await;
    let guard = holder.lock("k").await.unwrap();
    proxy.blackhole();
    let waiter = tokio::spawn(async move {
        let guard = other
            .lock_with("k", LockOptions::new().wait(TTL + SLACK))
            .await
            .unwrap();
        let acquired_at = Instant::now();
        guard.release().await.unwrap();
        acquired_at
    });
    tokio::time::timeout(TTL + SLACK, guard.lost())
        .await
        .expect("the loss was not signalled");
    let lost_at = Instant::now();
    let acquired_at = waiter.await.unwrap();
    assert!(
        lost_at < acquired_at,
        "the other client held the lock {:?} before the holder knew",
        lost_at - acquired_at
    );
    proxy.restore();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_latency_keeps_locks_working_and_renewed() {
    let server = server("redis-latency").await;
    let proxy = FaultProxy::start(server.addr()).unwrap();
    // 60 ms each way: a 120 ms round trip, an eighth of the ttl.
    proxy.set_latency(Duration::from_millis(60));
    let slow = locker(proxy.addr(), "latency").await;
    let direct = locker(server.addr(), "latency").await;
    let guard = slow.lock("k").await.unwrap();
    let until = Instant::now() + TTL * 3;
    while Instant::now() < until {
        tokio::time::sleep(TTL / 4).await;
        assert!(
            guard.is_held(),
            "renewals did not keep up: {:?}",
            guard.loss_signal().loss_reason()
        );
        assert!(direct.try_lock("k").await.unwrap().is_none());
    }
    let waiter =
        tokio::spawn(async move { direct.lock_with("k", LockOptions::new().wait(SLACK)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.release().await.unwrap();
    waiter.await.unwrap().unwrap().release().await.unwrap();
}

// ------------------------------------------------------------ holder processes

/// A lock holder in another process, reporting on its stdout (see
/// [`holder_process_helper`]), once it holds: with its token.
async fn holder(addr: impl std::fmt::Display, namespace: &str) -> (Helper, u64) {
    let url = server_url(addr, namespace, TTL);
    let mut holder =
        Helper::start("the holder", "holder_process_helper", HOLDER_URL_VAR, url).await;
    let held = holder.expect("HELD", Duration::from_secs(20)).await;
    (holder, held.parse().unwrap())
}

/// Not a test: run by [`holder`] in a child process. Takes lock `k`, says
/// `HELD <token>`, then every 50 ms `TICK <held> <token>` (a write it
/// would make with its token), until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper run as a separate holder process by the fault tests"]
async fn holder_process_helper() {
    let Some(locker) = helper_locker(HOLDER_URL_VAR).await else {
        return;
    };
    let guard = locker.lock("k").await.unwrap();
    println!("HELD {}", guard.token());
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        println!("TICK {} {}", guard.is_held(), guard.token());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_process_frees_the_lock_after_the_ttl() {
    let server = server("redis-sigkill").await;
    let (holder, held) = holder(server.addr(), "sigkill").await;
    let other = locker(server.addr(), "sigkill").await;
    assert!(
        other.try_lock("k").await.unwrap().is_none(),
        "the holder's lock is not held"
    );
    // Freed by expiry: not before the holder's last lease ended. It renews
    // every third of the ttl, so that lease ran at least two thirds of a
    // ttl past the kill.
    let bounds = FreedWithin {
        not_before: TTL / 2,
        wait: TTL + SLACK,
    };
    let kill = || holder.signal(libc::SIGKILL);
    let freed_after = freed_after_kill(kill, &other, ("k", held), bounds).await;
    assert!(
        freed_after <= TTL + SLACK,
        "free {freed_after:?} after the kill"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_holder_is_fenced_off_and_told_after_it_resumes() {
    let server = server("redis-sigstop").await;
    let resource = FencedResource::new();
    let (mut holder, old_token) = holder(server.addr(), "sigstop").await;
    resource.write(old_token, "from the first holder").unwrap();
    holder.signal(libc::SIGSTOP);
    let other = locker(server.addr(), "sigstop").await;
    let guard = other
        .lock_with("k", LockOptions::new().wait(TTL + SLACK))
        .await
        .unwrap();
    assert!(guard.token().get() > old_token);
    resource
        .write(guard.token().get(), "from the second holder")
        .unwrap();
    holder.signal(libc::SIGCONT);
    // Whatever the stale holder writes now is rejected, and it soon learns
    // that its lock is gone.
    loop {
        let tick = holder.expect("TICK", Duration::from_secs(10)).await;
        let (held, token) = tick.split_once(' ').unwrap();
        let stale = resource.write(token.parse().unwrap(), "from the stale holder");
        assert!(stale.is_err(), "a write with the old token was accepted");
        if held == "false" {
            break;
        }
    }
    assert!(resource.rejected() >= 1);
    assert_eq!(resource.last_write().unwrap().1, "from the second holder");
    guard.release().await.unwrap();
}
