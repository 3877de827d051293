//! Frozen holders between distlock's etcd `layout=concurrency` and
//! etcd's own client (`etcdctl lock`, etcdctl 3.4 on `PATH`; without it
//! these tests fail saying what to install), on one spawned etcd: a
//! holder frozen (SIGSTOP) past its lease is replaced by a waiter of the
//! other client, and the write it makes once resumed, with its old
//! token, is refused by a fenced register.
//!
//! The distlock holder runs in a child process: this test binary run
//! again with `DISTLOCK_ETCD_PEER_HOLDER` set, executing the ignored test
//! `holder_process`, which reports on its stdout.

#[path = "common/child.rs"]
mod child;
mod common;

use std::time::{Duration, Instant};

use child::{successor_writes, Child};
use common::connect;
use distlock_testkit::etcd::{shared_etcd_url, TEST_TIMEOUTS};
use distlock_testkit::etcdctl::{Etcdctl, CREATE_REVISION_SH};
use distlock_testkit::{pause_group, resume_group, FencedResource};
use lock_core::LockOptions;

/// Tells a child run of this binary to hold a lock: `URL KEY`.
const HOLDER_ENV: &str = "DISTLOCK_ETCD_PEER_HOLDER";
/// How long anything here may take on a busy 2-core machine.
const LIMIT: Duration = Duration::from_secs(20);

/// A lock URL on the layout with a 2 s session on the shared server,
/// and `etcdctl` on it.
async fn server() -> (String, Etcdctl) {
    let url = shared_etcd_url().await.expect("etcd test server");
    let etcdctl = Etcdctl::for_url(&url).unwrap_or_else(|e| panic!("{e}"));
    let lock_url = format!("{url}?ttl=2s&layout=concurrency&{TEST_TIMEOUTS}");
    (lock_url, etcdctl)
}

/// Not a test: the distlock holder run in a child process. Prints
/// `HELD <token>`, then every 50 ms `WRITE <token> <n>` (work done under
/// the lock) and, once its guard reports the loss, `LOST <reason>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process for the frozen-holder tests"]
async fn holder_process() {
    let Ok(spec) = std::env::var(HOLDER_ENV) else {
        return;
    };
    let (url, key) = spec.split_once(' ').expect("URL KEY");
    let locker = connect(url).await.expect("connect");
    let guard = locker.lock(key).await.expect("lock");
    let token = guard.token().get();
    println!("HELD {token}");
    for n in 1.. {
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Work first, then look: the first write after a freeze is late.
        println!("WRITE {token} {n}");
        if let Some(reason) = guard.loss_signal().loss_reason() {
            println!("LOST {reason:?}");
            return;
        }
    }
}

/// A `WRITE <token> <n>` line: token and number.
fn write_line(line: &str) -> Option<(u64, u64)> {
    let (token, n) = line.strip_prefix("WRITE ")?.split_once(' ')?;
    Some((token.parse().ok()?, n.parse().ok()?))
}

/// Freezes `holder` and passes what it wrote before the freeze (all in
/// its stdout's pipe by then) to `register`; the number of its last write.
async fn freeze(holder: &mut Child, register: &FencedResource) -> u64 {
    pause_group(holder.pid()).await.unwrap();
    let mut last = 0;
    let drain = Duration::from_millis(100);
    while let Ok(Some(line)) = tokio::time::timeout(drain, holder.lines.recv()).await {
        if let Some((token, n)) = write_line(&line) {
            register.write(token, "before the freeze").unwrap();
            last = n;
        }
    }
    last
}

/// Resumes the frozen `holder` and checks that its next writes (after
/// number `last`), made with its old token, are refused by `register`:
/// at least one, up to three or until it says `LOST` (its reason, then).
async fn late_writes_are_refused(
    holder: &mut Child,
    register: &FencedResource,
    last: u64,
) -> Option<String> {
    resume_group(holder.pid()).unwrap();
    let mut refused = 0;
    let lost = loop {
        let line = holder.next_line(LIMIT).await;
        if let Some(reason) = line.strip_prefix("LOST ") {
            break Some(reason.to_owned());
        }
        if let Some((token, n)) = write_line(&line).filter(|(_, n)| *n > last) {
            let written = register.write(token, "after the freeze");
            assert!(
                written.is_err(),
                "late write {n} with token {token} was accepted"
            );
            refused += 1;
        }
        if refused == 3 {
            break None;
        }
    };
    assert!(refused > 0, "no write after the freeze");
    lost
}

/// An `etcdctl lock --ttl 2` holder frozen past its lease is replaced by
/// a distlock waiter with a higher token; resumed, its writes with the
/// old token are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_etcdctl_holder_is_replaced_by_distlock() {
    let (url, etcdctl) = server().await;
    let name = "faults-frozen-etcdctl";
    // `(exec sleep …)`, not `sleep …`: dash starts a plain command with
    // vfork, and a group frozen between that vfork and the exec leaves
    // the shell in uninterruptible sleep, which no freeze check counts
    // as stopped.
    let script = format!(
        "{CREATE_REVISION_SH}\necho \"HELD $TOKEN\"\n\
         n=0; while true; do n=$((n + 1)); echo \"WRITE $TOKEN $n\"; (exec sleep 0.05); done"
    );
    let mut holder = Child::start(etcdctl.lock(name, Some(2), &script)).await;
    let old: u64 = holder.expect("HELD").await.parse().unwrap();
    let register = FencedResource::new();
    register.write(old, "etcdctl").unwrap();
    let last = freeze(&mut holder, &register).await;
    let paused_at = Instant::now();
    let locker = connect(&url).await.unwrap();
    let guard = locker
        .lock_with(name, LockOptions::new().wait(LIMIT))
        .await
        .unwrap();
    successor_writes(&register, paused_at, (old, guard.token().get()), "distlock");
    late_writes_are_refused(&mut holder, &register, last).await;
    guard.release().await.unwrap();
}

/// A distlock holder (2 s session) frozen past its lease is replaced by
/// an `etcdctl lock` waiter, whose command reports a higher token;
/// resumed, the holder's writes with the old token are refused and its
/// guard reports the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_distlock_holder_is_replaced_by_etcdctl() {
    let (url, etcdctl) = server().await;
    let name = "faults-frozen-distlock";
    let mut holder = Child::spawn("holder_process", HOLDER_ENV, &format!("{url} {name}")).await;
    let old: u64 = holder.expect("HELD").await.parse().unwrap();
    let register = FencedResource::new();
    register.write(old, "distlock").unwrap();
    let last = freeze(&mut holder, &register).await;
    let paused_at = Instant::now();
    let script = format!("{CREATE_REVISION_SH}\necho \"HELD $TOKEN\"");
    let mut waiter = Child::start(etcdctl.lock(name, None, &script)).await;
    let new: u64 = waiter.expect("HELD").await.parse().unwrap();
    successor_writes(&register, paused_at, (old, new), "etcdctl");
    let lost = late_writes_are_refused(&mut holder, &register, last).await;
    assert_eq!(lost.as_deref(), Some("SessionExpired"));
}
