//! Fault tests for the etcd backend, each on dedicated servers: a leader
//! killed under contention, a member killed and restarted, a holder
//! process paused past its ttl or killed, the network cut, and the lease
//! revoked from outside.
//!
//! Lock holders that must be paused or killed run in a child process: this
//! test binary run again with `DISTLOCK_ETCD_HOLDER` set, executing the
//! ignored test `holder_process`, which reports on its stdout.

#[path = "common/child.rs"]
mod child;
mod common;
#[path = "common/servers.rs"]
mod servers;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use child::{successor_writes, Child};
use common::connect;
use distlock_testkit::etcd::{holder_entry, raw_client, start_cluster};
use distlock_testkit::{
    eventually, pause_group, resume_group, signal_group, FencedResource, Server,
};
use lock_core::{LockError, LockOptions, Locker, LossReason};
use servers::{leader_index, proxied_member, single_member, url_for};

/// Tells a child run of this binary to act as a lock holder: `URL KEY`.
const HOLDER_ENV: &str = "DISTLOCK_ETCD_HOLDER";
/// Slack for scheduling and elections on a busy 2-core machine.
const SLACK: Duration = Duration::from_secs(3);

fn wait(d: Duration) -> LockOptions {
    LockOptions::new().wait(d)
}

// ------------------------------------------------------------ holder child

/// Not a test: the lock holder run in a child process by the tests below.
/// Prints `HELD <token>`, then every 50 ms `WRITE <token>` (work done
/// under the lock, sent to the parent's fenced resource) and, once its
/// guard reports the loss, `LOST <reason>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process for the holder fault tests"]
async fn holder_process() {
    let Ok(spec) = std::env::var(HOLDER_ENV) else {
        return;
    };
    let (url, key) = spec.split_once(' ').expect("URL KEY");
    let locker = connect(url).await.expect("connect");
    let guard = locker.lock(key).await.expect("lock");
    let token = guard.token().get();
    println!("HELD {token}");
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Work first, then look: the first write after a pause is stale,
        // which is exactly what fencing tokens are for.
        println!("WRITE {token}");
        if let Some(reason) = guard.loss_signal().loss_reason() {
            println!("LOST {reason:?}");
            return;
        }
    }
}

// ------------------------------------------------------------ holder faults

/// A holder process on a member of its own, with a 2 s ttl in namespace
/// `ns`, holding `k`: the member (to keep running), the URL and the
/// token the holder reported.
async fn held_by_a_child(name: &str, ns: &str) -> (Server, String, Child, u64) {
    let server = single_member(name).await;
    let url = url_for([server.addr()], "2s", ns);
    let mut holder = Child::spawn("holder_process", HOLDER_ENV, &format!("{url} k")).await;
    let token = holder.expect("HELD").await.parse().unwrap();
    (server, url, holder, token)
}

/// A holder frozen past its ttl loses the lock to another client; when it
/// wakes, its guard reports the loss, and the write it makes with its old
/// token is rejected by the fencing resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_reports_lost_and_its_stale_write_is_rejected() {
    let (_server, url, mut holder, old_token) = held_by_a_child("etcd-paused", "paused").await;
    let resource = FencedResource::new();
    resource.write(old_token, "old holder").unwrap();

    pause_group(holder.pid()).await.unwrap();
    let paused_at = Instant::now();
    // What the holder wrote before the pause reaches the resource first.
    tokio::time::sleep(Duration::from_millis(100)).await;
    while let Ok(line) = holder.lines.try_recv() {
        if let Some(token) = line.strip_prefix("WRITE ") {
            resource
                .write(token.parse().unwrap(), "old holder")
                .unwrap();
        }
    }

    let locker = connect(&url).await.unwrap();
    let guard = locker
        .lock_with("k", wait(Duration::from_secs(10)))
        .await
        .unwrap();
    let new_token = guard.token().get();
    successor_writes(&resource, paused_at, (old_token, new_token), "new holder");

    resume_group(holder.pid()).unwrap();
    let mut stale = 0;
    let reason = loop {
        let line = holder.next_line(Duration::from_secs(10)).await;
        if let Some(token) = line.strip_prefix("WRITE ") {
            let written = resource.write(token.parse().unwrap(), "old holder");
            assert!(written.is_err(), "a stale write was accepted");
            stale += 1;
        } else if let Some(reason) = line.strip_prefix("LOST ") {
            break reason.to_owned();
        }
    };
    assert!(stale >= 1, "the holder made no write after waking");
    assert_eq!(reason, "SessionExpired");
    assert_eq!(resource.highest(), Some(new_token));
    assert!(guard.is_held());
    guard.release().await.unwrap();
}

/// A holder killed with SIGKILL keeps the lock until its lease expires
/// (not released at once, not forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_frees_the_lock_after_the_ttl() {
    let (_server, url, holder, old_token) = held_by_a_child("etcd-killed", "killed").await;
    signal_group(holder.pid(), libc::SIGKILL).unwrap();
    let killed_at = Instant::now();

    let locker = connect(&url).await.unwrap();
    assert!(
        locker.try_lock("k").await.unwrap().is_none(),
        "the lock was free right after the kill"
    );
    let guard = locker
        .lock_with("k", wait(Duration::from_secs(2) + SLACK))
        .await
        .unwrap();
    let freed_after = killed_at.elapsed();
    // The last keepalive was at most ttl/3 before the kill.
    assert!(
        freed_after >= Duration::from_millis(1200),
        "freed {freed_after:?} after the kill"
    );
    assert!(guard.token().get() > old_token);
    guard.release().await.unwrap();
}

// ------------------------------------------------------------ network

/// With the network to etcd cut, the holder's guard reports the loss before
/// the lease can have expired on the server, so before anyone else can hold
/// the lock; once the network is back, the same locker works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_cut_signals_lost_before_others_acquire() {
    let net = proxied_member("etcd-cut", "2s", "cut").await;
    let holder = connect(&net.through).await.unwrap();
    let other = connect(&net.direct).await.unwrap();
    let guard = holder.lock("k").await.unwrap();

    net.cut().await;
    let waiter = tokio::spawn(async move {
        let guard = other.lock_with("k", wait(Duration::from_secs(10))).await?;
        let acquired_at = Instant::now();
        guard.release().await?;
        Ok::<_, LockError>(acquired_at)
    });
    let reason = tokio::time::timeout(Duration::from_secs(2) + SLACK, guard.lost())
        .await
        .expect("the loss was not signalled");
    let lost_at = Instant::now();
    assert_eq!(reason, LossReason::SessionExpired);
    let acquired_at = waiter.await.unwrap().unwrap();
    assert!(
        lost_at <= acquired_at,
        "another client held the lock before the loss was signalled"
    );

    net.proxy.restore();
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
    eventually(SLACK * 3, "the locker to work again", || async {
        holder
            .lock_with("k", wait(Duration::from_secs(1)))
            .await?
            .release()
            .await
    })
    .await
    .unwrap();
}

/// Revoking the session lease from outside (as an operator would with
/// `etcdctl lease revoke`) is noticed at once, and the next acquire of the
/// same locker gets a new lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_revoked_from_outside_signals_lost() {
    let server = single_member("etcd-revoke").await;
    let url = url_for([server.addr()], "3s", "revoke");
    let locker = connect(&url).await.unwrap();
    let guard = locker.lock("k").await.unwrap();
    let client = raw_client(&url).await.unwrap();
    let (_, lease) = holder_entry(&client, &locker.name("k").unwrap())
        .await
        .unwrap()
        .expect("held");
    client.lease_client().revoke(lease).await.unwrap();

    let reason = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("the revocation was not noticed");
    assert!(
        matches!(reason, LossReason::SessionExpired | LossReason::TakenAway),
        "{reason:?}"
    );
    assert!(!guard.is_held());
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
    let again = locker
        .lock_with("k", wait(Duration::from_secs(2)))
        .await
        .unwrap();
    let (_, new_lease) = holder_entry(&client, &locker.name("k").unwrap())
        .await
        .unwrap()
        .expect("held");
    assert_ne!(new_lease, lease, "the revoked lease was reused");
    again.release().await.unwrap();
}

// ------------------------------------------------------------ cluster

/// Several clients contend for one key while the cluster's leader is
/// killed: never two holders at once (in-process checker), no stale token
/// accepted, and the lock keeps changing hands after the election.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_while_clients_contend() {
    let servers = start_cluster("etcd-leader", false).await.unwrap();
    let url = url_for(servers.iter().map(Server::addr), "5s", "leader");
    let inside = Arc::new(AtomicBool::new(false));
    let resource = FencedResource::new();
    let acquisitions = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let locker: Locker = connect(&url).await.unwrap();
        let (inside, resource) = (inside.clone(), resource.clone());
        let (acquisitions, stop) = (acquisitions.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                match locker.lock_with("k", wait(Duration::from_secs(15))).await {
                    Ok(guard) => {
                        assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                        resource
                            .write(guard.token().get(), "w")
                            .expect("stale token accepted");
                        acquisitions.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        inside.store(false, Ordering::SeqCst);
                        // A release cut short by the election finishes in the background.
                        let _ = guard.release().await;
                    }
                    Err(error) if error.is_retriable() || error.is_timeout() => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(error) => panic!("unexpected error: {error}"),
                }
            }
        }));
    }
    eventually(SLACK * 3, "contention to start", || async {
        acquisitions.load(Ordering::SeqCst) >= 20
    })
    .await
    .unwrap();
    let leader = leader_index(&servers).await;
    servers[leader].stop();
    let after_kill = acquisitions.load(Ordering::SeqCst);
    eventually(
        Duration::from_secs(30),
        "locking to go on after the election",
        || async { acquisitions.load(Ordering::SeqCst) >= after_kill + 50 },
    )
    .await
    .unwrap();
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(resource.rejected(), 0);
}

/// Locking works with one of three members down, and again once it is
/// back; the restarted member serves locks on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_killed_and_restarted() {
    let servers = start_cluster("etcd-member", false).await.unwrap();
    let url = url_for(servers.iter().map(Server::addr), "3s", "member");
    let locker = connect(&url).await.unwrap();
    // Each round's token must be above every token taken before it,
    // across the member's death and restart.
    let last = Arc::new(AtomicU64::new(0));
    let rounds = |locker: Locker, n: usize| {
        let last = Arc::clone(&last);
        async move {
            for _ in 0..n {
                let guard = locker.lock_with("k", wait(Duration::from_secs(5))).await?;
                let token = guard.token().get();
                let before = last.swap(token, Ordering::SeqCst);
                assert!(token > before, "token {token} after {before}");
                guard.release().await?;
            }
            Ok::<_, LockError>(())
        }
    };
    rounds(locker.clone(), 10).await.unwrap();

    // A follower, so that no election muddles what this test shows.
    let victim = (leader_index(&servers).await + 1) % servers.len();
    servers[victim].stop();
    rounds(locker.clone(), 30)
        .await
        .expect("locking with one member down");
    let fresh = connect(&url).await.unwrap();
    rounds(fresh, 10)
        .await
        .expect("a new locker with one member down");

    servers[victim].restart().await.unwrap();
    rounds(locker.clone(), 10).await.unwrap();
    let only_restarted = url_for([servers[victim].addr()], "3s", "member");
    let direct = connect(&only_restarted).await.unwrap();
    rounds(direct, 5)
        .await
        .expect("locking through the restarted member");
}
