//! ZooKeeper under faults, on real servers: a lock-holding process killed
//! or frozen, the network cut, the server restarted, an ensemble member
//! killed.
//!
//! Holders that must die or freeze run in a separate process: this test
//! binary run again with `ZK_FAULT_HOLDER_URL` set, executing
//! `holder_process`, which reports on stdout what it holds and writes.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::helper::Helper;
use common::{holder_of, local_standalone, SLACK};
use distlock_testkit::scenarios::{freed_after_kill, FreedWithin};
use distlock_testkit::zookeeper::{standalone_spec, zk_url, Ensemble};
use distlock_testkit::{pause_group, resume_group, signal_group, FaultProxy, FencedResource};
use lock_core::{FencingToken, LockError, LockOptions, Locker, LossReason};
use tokio::time::{sleep, timeout};

const HOLDER_URL: &str = "ZK_FAULT_HOLDER_URL";
const HOLDER_KEY: &str = "ZK_FAULT_HOLDER_KEY";
/// A URL on `addrs` in a namespace unique to `test`, with session timeout `ttl`.
fn url(addrs: &[SocketAddr], test: &str, ttl: Duration) -> String {
    zk_url(
        addrs,
        "/faults",
        &format!("ttl={}ms&namespace={test}", ttl.as_millis()),
    )
}

/// `waiter` waiting (up to a minute) for lock `k` in a task of its own;
/// the task returns the token it got, after releasing the lock.
fn spawn_waiter(waiter: Locker) -> tokio::task::JoinHandle<Result<FencingToken, LockError>> {
    tokio::spawn(async move {
        let guard = waiter
            .lock_with("k", LockOptions::new().wait(Duration::from_secs(60)))
            .await?;
        let token = guard.token();
        guard.release().await?;
        Ok(token)
    })
}

async fn connect(url: &str) -> Locker {
    common::connect(url).await.unwrap()
}

// ------------------------------------------------------------ holder process

/// A lock holder in another process, speaking through its stdout.
struct HolderProcess;

impl HolderProcess {
    /// Starts the holder on `url` and waits until it holds `key`; returns
    /// it and its fencing token.
    async fn start(url: &str, key: &str) -> (Helper, u64) {
        let env = [(HOLDER_URL, url), (HOLDER_KEY, key)];
        let mut holder = Helper::start("holder_process", &env).await;
        let held = holder.expect("HELD ", Duration::from_secs(20)).await;
        (holder, held.parse().unwrap())
    }
}

/// Not a test: the holder process run by the tests above. Takes the lock,
/// prints `HELD <token>`, then `WRITE <token>` every 50 ms whether or not
/// it still holds the lock (as a careless client would), and `LOST
/// <reason>` once its guard reports the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process for the other tests"]
async fn holder_process() {
    let (Ok(url), Ok(key)) = (std::env::var(HOLDER_URL), std::env::var(HOLDER_KEY)) else {
        return;
    };
    let locker = connect(&url).await;
    let guard = locker.lock(&key).await.unwrap();
    let token = guard.token().get();
    println!("HELD {token}");
    let signal = guard.loss_signal();
    tokio::spawn(async move {
        let reason = signal.lost().await;
        println!("LOST {reason:?}");
    });
    loop {
        println!("WRITE {token}");
        sleep(Duration::from_millis(50)).await;
    }
}

// ------------------------------------------------------------------- tests

/// A holder killed with SIGKILL never releases; its lock is free once the
/// server expires its session: after about the session timeout, not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_frees_the_lock_after_the_session_timeout() {
    let ttl = Duration::from_secs(2);
    let url = url(&[local_standalone().await], "killed", ttl);
    let (holder, token) = HolderProcess::start(&url, "k").await;
    let other = connect(&url).await;
    assert!(other.try_lock("k").await.unwrap().is_none());
    // The server counts from its last word with the holder (at most a
    // ping interval, 3/20 of the timeout, before the kill).
    let bounds = FreedWithin {
        not_before: ttl / 2,
        wait: ttl + SLACK,
    };
    let kill = || signal_group(holder.pid, libc::SIGKILL).unwrap();
    freed_after_kill(kill, &other, ("k", token), bounds).await;
}

/// A holder frozen (SIGSTOP) past its session timeout loses the lock to
/// another client; resumed, its guard reports the loss, and the writes it
/// still makes with its old token are rejected by a fencing resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_is_fenced_off_and_told_its_lock_is_lost() {
    let ttl = Duration::from_secs(1);
    let url = url(&[local_standalone().await], "paused", ttl);
    let resource = FencedResource::new();
    let (mut holder, old_token) = HolderProcess::start(&url, "k").await;
    holder.expect("WRITE ", SLACK).await;
    resource
        .write(old_token, "holder before the pause")
        .unwrap();

    pause_group(holder.pid).await.unwrap();
    let other = connect(&url).await;
    let guard = other
        .lock_with("k", LockOptions::new().wait(ttl + SLACK))
        .await
        .expect("the lock of a frozen holder is freed after its session timeout");
    assert!(guard.token().get() > old_token);
    resource.write(guard.token().get(), "new holder").unwrap();

    holder.skip_printed();
    resume_group(holder.pid).unwrap();
    // The holder's next write and its loss report come in either order.
    let (mut written, mut reason) = (None, None);
    while written.is_none() || reason.is_none() {
        let line = holder.expect("", SLACK).await;
        if let Some(token) = line.strip_prefix("WRITE ") {
            written.get_or_insert(token.parse::<u64>().unwrap());
        } else if let Some(lost) = line.strip_prefix("LOST ") {
            reason = Some(lost.to_owned());
        }
    }
    let (written, reason) = (written.unwrap(), reason.unwrap());
    assert_eq!(written, old_token);
    assert!(
        resource.write(written, "holder after the pause").is_err(),
        "a stale write was accepted"
    );
    assert!(
        reason == "SessionExpired" || reason == "ValidityExpired",
        "lost for {reason}"
    );
    assert_eq!(resource.rejected(), 1);
    assert_eq!(resource.last_write().unwrap().1, "new holder");
    guard.release().await.unwrap();
}

/// A network cut between holder and server: the guard reports the loss
/// within the validity window, before the server lets anybody else take
/// the lock; once the network is back the locker works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_cut_is_signalled_before_others_can_acquire() {
    let ttl = Duration::from_secs(2);
    let server = local_standalone().await;
    let proxy = FaultProxy::start(server).unwrap();
    let cut_off = connect(&url(&[proxy.addr()], "cut", ttl)).await;
    let other = connect(&url(&[server], "cut", ttl)).await;
    let guard = cut_off.lock("k").await.unwrap();
    let waiter = tokio::spawn(async move {
        let guard = other
            .lock_with("k", LockOptions::new().wait(ttl + SLACK))
            .await?;
        let acquired_at = Instant::now();
        guard.release().await?;
        Ok::<_, LockError>(acquired_at)
    });
    sleep(Duration::from_millis(200)).await;
    proxy.cut();
    let cut_at = Instant::now();
    let reason = timeout(ttl + SLACK, guard.lost())
        .await
        .expect("a cut network was not signalled as a loss");
    let lost_at = Instant::now();
    assert_eq!(reason, LossReason::ValidityExpired);
    assert!(
        lost_at - cut_at < ttl,
        "signalled after {:?}",
        lost_at - cut_at
    );
    let acquired_at = waiter.await.unwrap().unwrap();
    assert!(lost_at < acquired_at, "another client held the lock first");
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));

    proxy.restore();
    let again = timeout(SLACK * 2, async {
        loop {
            match cut_off.try_lock("k").await {
                Ok(Some(guard)) => return guard,
                Ok(None) => panic!("nobody holds k"),
                Err(e) if e.is_retriable() => sleep(Duration::from_millis(100)).await,
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await
    .expect("the locker did not recover after the network came back");
    again.release().await.unwrap();
}

/// A standalone server killed and restarted within the session timeout:
/// the session survives (ZooKeeper persists it), so the lock stays held
/// and a waiter still wakes on release; tokens keep increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_restart_keeps_sessions_locks_and_token_order() {
    let ttl = Duration::from_secs(10);
    let server = standalone_spec().unwrap().start().await.unwrap();
    let url = url(&[server.addr()], "restart", ttl);
    let (holder, waiter) = (connect(&url).await, connect(&url).await);
    let guard = holder.lock("k").await.unwrap();
    let waiting = spawn_waiter(waiter);
    sleep(Duration::from_millis(300)).await;
    server.restart().await.unwrap();
    let info = timeout(SLACK * 2, async {
        loop {
            match holder.inspect("k").await {
                Ok(info) => return info,
                Err(_) => sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await
    .expect("the locker did not reconnect after the restart")
    .expect("the lock vanished in the restart");
    assert_eq!(info.owner, guard.owner().as_str());
    assert!(guard.is_held(), "{:?}", guard.loss_signal().loss_reason());
    assert!(!waiting.is_finished());
    guard.release().await.unwrap();
    let next = timeout(SLACK, waiting)
        .await
        .expect("the waiter was not woken");
    assert!(next.unwrap().unwrap() > info.token);
}

/// In a 3-server ensemble, killing the server a holder and a waiter are
/// connected to: both sessions move to another server, the lock stays
/// held (no loss signalled), and the waiter still wakes on release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensemble_member_killed_keeps_sessions_locks_and_watches() {
    let ttl = Duration::from_secs(3);
    let ensemble = Ensemble::start(3).await.unwrap_or_else(|e| panic!("{e}"));
    let leader = ensemble.leader().await;
    // Proxies show which member each session is connected to.
    let proxies: Vec<FaultProxy> = ensemble
        .client_addrs()
        .into_iter()
        .map(|addr| FaultProxy::start(addr).unwrap())
        .collect();
    let addrs: Vec<_> = proxies.iter().map(FaultProxy::addr).collect();
    let url = url(&addrs, "member_killed", ttl);
    let connected = |count: usize| proxies.iter().position(|p| p.connections() == count);

    // A holder on a follower (killing the leader would add an election).
    let (holder, guard, member) = loop {
        let holder = connect(&url).await;
        let guard = holder.lock("k").await.unwrap();
        let member = connected(1).unwrap();
        if Some(member) != leader {
            break (holder, guard, member);
        }
        guard.release().await.unwrap();
    };
    // A waiter on the same member, its watch registered there.
    let waiting = loop {
        let waiter = connect(&url).await;
        let waiting = spawn_waiter(waiter);
        sleep(Duration::from_millis(300)).await;
        if proxies[member].connections() == 2 {
            break waiting;
        }
        waiting.abort();
        sleep(Duration::from_millis(100)).await;
    };

    ensemble.members[member].stop();
    sleep(ttl + Duration::from_secs(1)).await;
    assert!(
        guard.is_held(),
        "lost: {:?}",
        guard.loss_signal().loss_reason()
    );
    let info = holder_of(&holder, "k", "the lock vanished").await;
    assert_eq!(info.owner, guard.owner().as_str());
    assert_eq!(
        proxies[member].connections(),
        0,
        "still on the killed member"
    );
    assert!(!waiting.is_finished(), "the waiter got a held lock");

    let old_token = guard.token();
    guard.release().await.unwrap();
    let token = timeout(SLACK, waiting)
        .await
        .expect("the waiter was not woken after the failover")
        .unwrap()
        .unwrap();
    assert!(token > old_token);
}

/// In a 3-server ensemble, a lock just taken through one server is seen
/// by `inspect` through every other: each server may apply the leader's
/// commits a little later than the one that answered the holder, so
/// `inspect` first makes its server catch up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_through_another_member_sees_a_lock_just_taken() {
    let ttl = Duration::from_secs(3);
    let ensemble = Ensemble::start(3).await.unwrap_or_else(|e| panic!("{e}"));
    let on_member = |i: usize| url(&[ensemble.client_addr(i)], "inspect_elsewhere", ttl);
    // The holder on the leader, whose answer comes as soon as a quorum has
    // the write: one of the two followers may not have applied it yet.
    let leader = ensemble.leader().await.expect("a leader");
    let holder = connect(&on_member(leader)).await;
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let lookers = [
        connect(&on_member(followers[0])).await,
        connect(&on_member(followers[1])).await,
    ];
    for round in 0..150 {
        let key = format!("k{round}");
        let guard = holder.try_lock(&key).await.unwrap().expect("a fresh key");
        for (member, looker) in lookers.iter().enumerate() {
            let seen = looker.inspect(&key).await.unwrap();
            assert_eq!(
                seen.map(|info| info.token),
                Some(guard.token()),
                "round {round}: member {} missed the lock",
                followers[member] + 1
            );
        }
        guard.release().await.unwrap();
    }
}
