//! Leader elections on a dedicated `redis-server` under faults: a leader
//! process frozen past its lease is replaced, learns that it lost when it
//! resumes and is fenced off; an observer cut off from the server resumes
//! with the leader of the moment; and a server restart (with `appendfsync
//! always`) never lets two candidates lead with valid terms.
//!
//! A "leader process" is this test binary run again with
//! `LEADER_URL_VAR` set: the `leader_process_helper` test then campaigns
//! and reports on stdout (see [`leader_process_helper`]).

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::helper::{helper_locker, lines_of, Helper};
use common::{connect, server_url, start};
use distlock_testkit::redis::{redis_aof_spec, redis_spec};
use distlock_testkit::{pause_group, resume_group, FaultProxy, FencedResource};
use lock_core::{LeaderInfo, LeaderWatch, LockOptions, Locker};
use tokio::sync::watch;

const LEADER_URL_VAR: &str = "DISTLOCK_TEST_LEADER_URL";
const TTL: Duration = Duration::from_secs(1);
const SLACK: Duration = Duration::from_secs(5);
/// How long any one expected report may take.
const PATIENCE: Duration = Duration::from_secs(15);

async fn locker(addr: impl std::fmt::Display, namespace: &str) -> Locker {
    connect(&server_url(addr, namespace, TTL)).await.unwrap()
}

/// The next leader `observer` reports, within [`PATIENCE`].
async fn next(observer: &mut LeaderWatch) -> Option<LeaderInfo> {
    tokio::time::timeout(PATIENCE, observer.changed())
        .await
        .expect("no change of leader was reported")
}

// ------------------------------------------------------------ leader processes

/// A candidate in another process: campaigns for election `e`, then
/// writes with its term when sent `write` and says when it lost; see
/// [`leader_process_helper`].
async fn leader_process(addr: impl std::fmt::Display, namespace: &str) -> Helper {
    let url = server_url(addr, namespace, TTL);
    Helper::start(
        "the leader process",
        "leader_process_helper",
        LEADER_URL_VAR,
        url,
    )
    .await
}

/// Not a test: run by [`leader_process`] in a child process. Campaigns in
/// election `e`, says `LEADER <term>`, then for each `write` line on stdin
/// says `WRITE <term>` (the write it makes as leader, whatever it
/// believes), and says `lost` once it learns it lost; until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper run as a separate leader process by the fault tests"]
async fn leader_process_helper() {
    let Some(locker) = helper_locker(LEADER_URL_VAR).await else {
        return;
    };
    let leadership = locker.election("e").unwrap().campaign("old").await.unwrap();
    let term = leadership.term().get();
    println!("LEADER {term}");
    let mut orders = lines_of(std::io::stdin());
    let loss = leadership.loss_signal();
    let mut told = false;
    loop {
        tokio::select! {
            order = orders.recv() => match order.as_deref() {
                Some("write") => println!("WRITE {term}"),
                Some(_) => {}
                None => return,
            },
            _ = loss.lost(), if !told => {
                told = true;
                println!("lost");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_is_replaced_told_it_lost_and_fenced_off() {
    let server = start(redis_spec("redis-election-freeze")).await;
    let register = FencedResource::new();
    let mut old = leader_process(server.addr(), "freeze").await;
    let old_term: u64 = old.expect("LEADER", PATIENCE).await.parse().unwrap();
    old.send("write");
    let written: u64 = old.expect("WRITE", PATIENCE).await.parse().unwrap();
    register.write(written, "old leader").unwrap();
    pause_group(old.pid()).await.unwrap();

    let election = locker(server.addr(), "freeze").await.election("e").unwrap();
    let new = election
        .campaign_with("new", LockOptions::new().wait(TTL + SLACK))
        .await
        .unwrap();
    assert!(
        new.term().get() > old_term,
        "term {} after {old_term}",
        new.term()
    );
    register.write(new.term().get(), "new leader").unwrap();
    let leader = election.leader().await.unwrap().expect("a leader");
    assert_eq!(
        (leader.term, leader.value.as_str()),
        (new.term(), "new"),
        "{leader:?}"
    );

    resume_group(old.pid()).unwrap();
    // The resumed process writes with the term it had; the register
    // refuses it. It also learns that it lost.
    old.send("write");
    let stale: u64 = old.expect("WRITE", PATIENCE).await.parse().unwrap();
    assert_eq!(stale, old_term);
    let refused = register.write(stale, "resumed old leader");
    assert!(refused.is_err(), "the old term's write was accepted");
    old.expect("lost", PATIENCE).await;
    assert_eq!(register.rejected(), 1);
    assert_eq!(register.last_write().unwrap().1, "new leader");
    assert!(new.is_held());
    new.resign().await.unwrap();
}

// ------------------------------------------------------------ observers

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_cut_off_resumes_with_the_current_leader() {
    let server = start(redis_spec("redis-election-observer")).await;
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let watcher = locker(proxy.addr(), "observer").await;
    let mut observer = watcher.election("e").unwrap().observe();
    assert_eq!(next(&mut observer).await, None);
    let candidates = [
        locker(server.addr(), "observer").await,
        locker(server.addr(), "observer").await,
        locker(server.addr(), "observer").await,
    ];
    let elections = candidates.map(|l| l.election("e").unwrap());
    let a = elections[0].campaign("a").await.unwrap();
    let seen = next(&mut observer).await.unwrap();
    let first = a.term();
    assert_eq!((seen.term, seen.value.as_str()), (first, "a"));

    // Cut: connections reset, messages lost. Leadership changes meanwhile.
    proxy.cut();
    a.resign().await.unwrap();
    let b = elections[1].campaign("b").await.unwrap();
    b.proclaim("b, proclaimed").await.unwrap();
    proxy.restore();
    let expected = (b.term(), "b, proclaimed".to_owned());
    resumes_with(&mut observer, first, expected).await;

    // A silent partition: nothing moves until it heals. Another change.
    proxy.blackhole();
    b.resign().await.unwrap();
    let c = elections[2].campaign("c").await.unwrap();
    proxy.restore();
    resumes_with(&mut observer, first, (c.term(), "c".to_owned())).await;
    c.resign().await.unwrap();
    assert_eq!(next(&mut observer).await, None);
}

/// Reads `observer` until it reports `expected` (term and value): nothing
/// on the way may go back in term, and no state may repeat.
async fn resumes_with(
    observer: &mut LeaderWatch,
    floor: lock_core::FencingToken,
    expected: (lock_core::FencingToken, String),
) {
    let mut last = floor;
    loop {
        let Some(seen) = next(observer).await else {
            continue;
        };
        assert!(seen.term >= last, "term {} after {last}", seen.term);
        last = seen.term;
        if (seen.term, seen.value.clone()) == expected {
            return;
        }
    }
}

// ------------------------------------------------------------ restarts

/// One leadership as its candidate lived it: from the moment campaigning
/// returned until it decided to resign or learnt it lost.
#[derive(Clone, Debug)]
struct Term {
    candidate: usize,
    term: u64,
    from: Instant,
    until: Instant,
}

/// Campaigns again and again (holding each leadership ~200 ms, writing
/// with its term every 20 ms while it believes it leads) until `stop`.
async fn candidate(
    id: usize,
    locker: Locker,
    register: FencedResource,
    terms: Arc<Mutex<Vec<Term>>>,
    count: watch::Sender<usize>,
    stop: watch::Receiver<bool>,
) {
    let election = locker.election("e").unwrap();
    while !*stop.borrow() {
        let options = LockOptions::new().wait(Duration::from_secs(2));
        let Ok(leadership) = election.campaign_with(format!("c{id}"), options).await else {
            // The server is down, or the other candidate leads: again.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let from = Instant::now();
        let term = leadership.term().get();
        let loss = leadership.loss_signal();
        let until = loop {
            tokio::select! {
                _ = loss.lost() => break Instant::now(),
                () = tokio::time::sleep(Duration::from_millis(20)) => {
                    if from.elapsed() >= Duration::from_millis(200) {
                        break Instant::now();
                    }
                    if leadership.is_held() {
                        let _ = register.write(term, format!("c{id}"));
                    }
                }
            }
        };
        let _ = leadership.resign().await;
        let mut terms = terms.lock().unwrap();
        terms.push(Term {
            candidate: id,
            term,
            from,
            until,
        });
        count.send_replace(terms.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_never_gives_two_leaders_valid_terms() {
    let server = start(redis_aof_spec("redis-election-restart")).await;
    let register = FencedResource::new();
    let terms = Arc::new(Mutex::new(Vec::new()));
    let (count, mut counted) = watch::channel(0);
    let (stop, stopped) = watch::channel(false);
    let mut observer = locker(server.addr(), "restart")
        .await
        .election("e")
        .unwrap()
        .observe();
    let mut observing = stopped.clone();
    let observed = tokio::spawn(async move {
        let mut seen = Vec::new();
        loop {
            tokio::select! {
                state = observer.changed() => seen.push(state),
                _ = observing.changed() => return seen,
            }
        }
    });
    let mut tasks = Vec::new();
    for id in 0..2 {
        let locker = locker(server.addr(), "restart").await;
        tasks.push(tokio::spawn(candidate(
            id,
            locker,
            register.clone(),
            Arc::clone(&terms),
            count.clone(),
            stopped.clone(),
        )));
    }
    let at_least = |n: usize| move |c: &usize| *c >= n;
    tokio::time::timeout(PATIENCE, counted.wait_for(at_least(3)))
        .await
        .expect("no leaderships before the restart")
        .unwrap();
    server.restart().await.unwrap();
    let before = *counted.borrow();
    tokio::time::timeout(PATIENCE * 2, counted.wait_for(at_least(before + 4)))
        .await
        .expect("no leaderships after the restart")
        .unwrap();
    stop.send_replace(true);
    for task in tasks {
        task.await.unwrap();
    }

    let mut terms = terms.lock().unwrap().clone();
    terms.sort_by_key(|t| t.from);
    for pair in terms.windows(2) {
        let (earlier, later) = (&pair[0], &pair[1]);
        assert!(
            later.term > earlier.term,
            "term {} after {}: {terms:#?}",
            later.term,
            earlier.term
        );
        assert!(
            later.from >= earlier.until,
            "two leaders at once: {earlier:?} and {later:?}"
        );
    }
    assert_eq!(register.rejected(), 0, "a write with an old term came late");
    let candidates: HashSet<usize> = terms.iter().map(|t| t.candidate).collect();
    assert_eq!(candidates.len(), 2, "one candidate never led: {terms:#?}");
    // The observer saw leaders in term order, the last no newer than the
    // last term held.
    let seen = observed.await.unwrap();
    let mut last = 0;
    for leader in seen.into_iter().flatten() {
        assert!(
            leader.term.get() >= last,
            "observed term {} after {last}",
            leader.term
        );
        last = leader.term.get();
    }
    assert!(last <= terms.last().unwrap().term, "observed term {last}");
}
