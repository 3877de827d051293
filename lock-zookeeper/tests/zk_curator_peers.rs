//! distlock with `layout=curator` and Apache Curator's own recipes on one
//! ZooKeeper: Curator peers (Debian's Curator 5.4 jars, driven by
//! `distlock_testkit::curator`) and distlock lockers take the same locks,
//! elections, read-write locks and semaphores and must exclude each other
//! as two Curator clients would. Every hold is checked against a
//! fencing register with the hold's own token (the node's czxid, on both
//! sides).

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::mixed::{mixed_run, Fleet, Peers, ROUNDS, TTL};
use common::SLACK;
use distlock_testkit::child::{HoldMode, TestChild};
use distlock_testkit::curator::{Held, Kind, Take};
use distlock_testkit::scenarios::rw_faults::child_holder;
use distlock_testkit::{pause_group, resume_group, FencedResource};
use lock_core::LockOptions;
use tokio::time::timeout;
/// The variable telling the child holder what to hold.
const CHILD_VAR: &str = "ZK_CURATOR_CHILD";

/// Curator peers and distlock lockers increment one counter under one
/// mutex, [`ROUNDS`] times each: the total is exact, no two holds
/// overlap, and the fencing register accepted every write (tokens only
/// rose).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_counter_is_exact_across_curator_and_distlock() {
    let fleet = Fleet::new("mutex-counter", Peers::Curator).await;
    let ledger = mixed_run(&fleet, "counter", |_, _| Kind::Mutex).await;
    ledger.assert_safe();
    assert_eq!(*ledger.counter.lock().unwrap(), 4 * ROUNDS as u64);
    assert_eq!(ledger.register.writes().accepted(), 8 * ROUNDS as u64);
}

/// Curator's LeaderLatch and distlock's election on one path: one leader
/// at a time, in line order; each side names the other's leader by its
/// participant id / value, and terms are the leaders' czxids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_latch_and_election_share_one_leader() {
    let fleet = Fleet::new("latch", Peers::Curator).await;
    let path = fleet.path("election");
    let latch = |id: &str| Take::Latch(path.clone(), id.to_owned());
    let (mut first, mut third) = (fleet.peer().await, fleet.peer().await);
    let mut observer = fleet.peer().await;
    let locker = fleet.locker().await;
    let election = locker.election("election").unwrap();
    let mut changes = election.observe();

    let a = first.take(&latch("curator-a")).await.unwrap();
    assert_eq!(leader(&election).await, ("curator-a".into(), a.czxid));
    assert_eq!(next_leader(&mut changes).await, "curator-a");
    let candidate = locker.clone();
    let second = tokio::spawn(async move { candidate.election("election")?.campaign("b").await });
    fleet.wait_for_nodes(&path, "latch-", 2).await;
    third.begin(&latch("curator-c")).await.unwrap();
    fleet.wait_for_nodes(&path, "latch-", 3).await;
    let id = observer.leader_of(&path).await.unwrap();
    assert_eq!(id.as_deref(), Some("curator-a"));
    assert!(
        !second.is_finished(),
        "distlock led beside Curator's leader"
    );

    first.release().await.unwrap();
    let b = timeout(SLACK, second).await.expect("distlock never led");
    let b = b.unwrap().unwrap();
    assert!(b.term().get() > a.czxid);
    let id = observer.leader_of(&path).await.unwrap();
    assert_eq!(id.as_deref(), Some("b"), "Curator sees distlock's leader");
    assert_eq!(next_leader(&mut changes).await, "b");

    let b_term = b.term().get();
    b.resign().await.unwrap();
    let c = timeout(SLACK, third.held())
        .await
        .expect("Curator never led");
    let c = c.unwrap();
    assert!(c.czxid > b_term);
    assert_eq!(next_leader(&mut changes).await, "curator-c");
    assert_eq!(leader(&election).await, ("curator-c".into(), c.czxid));
}

/// The leader `election` reports now: its value and term.
async fn leader(election: &lock_core::Election) -> (String, u64) {
    let info = election.leader().await.unwrap().expect("a leader");
    (info.value, info.term.get())
}

/// The next leader `changes` reports, by value (moments without a
/// leader skipped).
async fn next_leader(changes: &mut lock_core::LeaderWatch) -> String {
    let next = async {
        loop {
            if let Some(leader) = changes.changed().await {
                return leader.value;
            }
        }
    };
    timeout(SLACK, next).await.expect("no leader seen")
}

/// Curator's and distlock's readers share a read-write lock, writers of
/// either exclude everyone: a reader of each side holds at once, and a
/// mixed run of readers and writers shows no writer beside another hold
/// (spans in the read-write fencing register) and no refused access.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_lock_is_shared_by_readers_and_exclusive_for_writers() {
    let fleet = Fleet::new("rw", Peers::Curator).await;
    let (mut peer, locker) = (fleet.peer().await, fleet.locker().await);
    peer.take(&Take::Read(fleet.path("config"))).await.unwrap();
    let wait = LockOptions::new().wait(SLACK);
    let read = locker.rwlock("config").unwrap().read_with(wait).await;
    let read = read.expect("a distlock reader joins a Curator reader");
    assert!(locker
        .rwlock("config")
        .unwrap()
        .try_write()
        .await
        .unwrap()
        .is_none());
    peer.release().await.unwrap();
    read.release().await.unwrap();

    let plan = |holder, round| [Kind::Read, Kind::Write][(holder / 2 + round) % 2];
    let ledger = mixed_run(&fleet, "config", plan).await;
    ledger.assert_safe();
    let writes = ledger.register.writes().accepted();
    assert_eq!(*ledger.counter.lock().unwrap(), writes / 2);
}

/// Curator's InterProcessSemaphoreV2 and distlock's semaphore with the
/// same limit, taken by turns: everyone is served, and never more holders
/// than the limit at once. (The holds here rarely pile up to the limit:
/// the case below fills the semaphore on purpose.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_limit_holds_across_curator_and_distlock() {
    const LIMIT: u32 = 2;
    let fleet = Fleet::new("semaphore", Peers::Curator).await;
    let ledger = mixed_run(&fleet, "pool", |_, _| Kind::Permit(LIMIT)).await;
    ledger.assert_safe();
    assert!(ledger.most.load(Ordering::SeqCst) <= LIMIT as usize);
}

/// A semaphore full of Curator's leases has no room for distlock, and one
/// full of both sides' has none for Curator: each side counts the other's
/// leases against the limit they share by convention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_full_on_one_side_has_no_room_for_the_other() {
    const LIMIT: u32 = 2;
    let fleet = Fleet::new("semaphore-full", Peers::Curator).await;
    let (path, leases) = (fleet.path("pool"), format!("{}/leases", fleet.path("pool")));
    let permit = Take::Permit(path.clone(), LIMIT);
    let (mut a, mut b, mut c) = (fleet.peer().await, fleet.peer().await, fleet.peer().await);
    a.take(&permit).await.unwrap();
    b.take(&permit).await.unwrap();
    let locker = fleet.locker().await;
    let pool = locker.semaphore("pool", LIMIT).unwrap();
    assert!(
        pool.try_acquire().await.unwrap().is_none(),
        "distlock took a third permit of two"
    );
    let waiting = tokio::spawn(async move { pool.acquire().await });
    fleet.wait_for_nodes(&leases, "lease-", 3).await;
    assert!(
        !waiting.is_finished(),
        "distlock's waiter took a third permit"
    );
    a.release().await.unwrap();
    let guard = timeout(SLACK, waiting)
        .await
        .expect("distlock never got a permit");
    let guard = guard.unwrap().unwrap();

    c.begin(&permit).await.unwrap();
    fleet.wait_for_nodes(&leases, "lease-", 3).await;
    let early = timeout(Duration::from_millis(300), c.held()).await;
    assert!(
        early.is_err(),
        "Curator took a third permit beside distlock's"
    );
    guard.release().await.unwrap();
    timeout(SLACK, c.held())
        .await
        .expect("Curator never got a permit")
        .unwrap();
    b.release().await.unwrap();
    c.release().await.unwrap();
}

/// A Curator holder frozen past its session timeout is replaced by the
/// distlock waiter queued behind it; resumed, it still believes it holds
/// (Curator's mutex does not notice by itself), and its write with its
/// old token is refused by the fencing register.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_curator_holder_is_replaced_by_distlock_and_fenced_off() {
    let fleet = Fleet::new("frozen-curator", Peers::Curator).await;
    let fence = FencedResource::new();
    let mut peer = fleet.peer().await;
    let old = peer.take(&Take::Mutex(fleet.path("k"))).await.unwrap();
    fence.write(old.czxid, "curator").unwrap();
    let locker = fleet.locker().await;
    let waiting = tokio::spawn(async move {
        let wait = LockOptions::new().wait(TTL + SLACK * 2);
        locker.lock_with("k", wait).await
    });
    fleet.wait_for_nodes(&fleet.path("k"), "lock-", 2).await;

    pause_group(peer.pid()).await.unwrap();
    let guard = waiting
        .await
        .unwrap()
        .expect("the distlock waiter took over");
    assert!(guard.token().get() > old.czxid);
    fleet
        .assert_gone("k", &old.node, "distlock took over")
        .await;
    fence.write(guard.token().get(), "distlock").unwrap();

    resume_group(peer.pid()).unwrap();
    let believed = timeout(SLACK, peer.holding()).await.expect("no answer");
    assert_eq!(believed.unwrap(), Some(old.czxid), "what Curator believes");
    assert!(fence.write(old.czxid, "curator, late").is_err());
    assert_eq!(fence.last_write().unwrap().1, "distlock");
    guard.release().await.unwrap();
}

/// A distlock holder (a child process) frozen past its session timeout is
/// replaced by the Curator waiter queued behind it; resumed, it is told it
/// lost, and its late write is refused by the fencing register.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_distlock_holder_is_replaced_by_curator_and_fenced_off() {
    let fleet = Fleet::new("frozen-distlock", Peers::Curator).await;
    let fence = FencedResource::new();
    let spec = HoldMode::Lock.spec(&format!("k {}", fleet.url()));
    let mut child = TestChild::spawn("child_holder_process", CHILD_VAR, &spec).await;
    let old: u64 = said(&mut child, "HELD lock").await.parse().unwrap();
    fence.write(old, "distlock").unwrap();
    let node = fleet
        .raw
        .list_children(&fleet.path("k"))
        .await
        .unwrap()
        .remove(0);
    let mut peer = fleet.peer().await;
    peer.begin(&Take::Mutex(fleet.path("k"))).await.unwrap();
    fleet.wait_for_nodes(&fleet.path("k"), "lock-", 2).await;

    pause_group(child.pid()).await.unwrap();
    let held = timeout(TTL + SLACK * 2, peer.held()).await;
    let held: Held = held.expect("the Curator waiter took over").unwrap();
    assert!(held.czxid > old);
    fleet.assert_gone("k", &node, "Curator took over").await;
    fence.write(held.czxid, "curator").unwrap();

    while child.lines.try_recv().is_ok() {}
    resume_group(child.pid()).unwrap();
    let late: u64 = said(&mut child, "WRITE").await.parse().unwrap();
    assert_eq!(late, old);
    assert!(fence.write(late, "distlock, late").is_err());
    said(&mut child, "LOST").await;
    assert_eq!(fence.last_write().unwrap().1, "curator");
    peer.release().await.unwrap();
}

/// The rest of the child's next report starting with `word`.
async fn said(child: &mut TestChild, word: &str) -> String {
    let marker = format!("rw-child: {word}");
    loop {
        let line = child.next_line(SLACK * 2).await;
        if let Some((_, rest)) = line.split_once(&marker) {
            return rest.trim().to_owned();
        }
    }
}

/// Not a test: the distlock holder the fault test above freezes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of frozen_distlock_holder_is_replaced_by_curator_and_fenced_off"]
async fn child_holder_process() {
    child_holder(CHILD_VAR, |url| async move {
        common::connect(&url).await.unwrap()
    })
    .await;
}
