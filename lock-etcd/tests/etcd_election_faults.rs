//! Fault tests for leader election on etcd, each on dedicated servers: a
//! leader process frozen past its ttl, an observer cut off from the
//! cluster while leadership changes (with and without the history it
//! missed compacted), a server restart and a cluster leader killed under
//! campaigning candidates.
//!
//! The leader that must be frozen runs in a child process: this test
//! binary run again with `DISTLOCK_ETCD_LEADER` set, executing the ignored
//! test `leader_process`, which reports on its stdout.

#[path = "common/child.rs"]
mod child;
mod common;
#[path = "common/servers.rs"]
mod servers;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use child::{successor_writes, Child};
use common::connect;
use distlock_testkit::etcd::{keys_under, raw_client, start_cluster};
use distlock_testkit::{eventually, pause_group, resume_group, FencedResource, Server};
use lock_core::{LeaderInfo, LeaderWatch, LockOptions, Locker, LossSignal};
use servers::{leader_index, proxied_member, single_member, url_for};

/// Tells a child run of this binary to campaign: `URL ELECTION VALUE`.
const LEADER_ENV: &str = "DISTLOCK_ETCD_LEADER";
/// Slack for scheduling and elections on a busy 2-core machine.
const SLACK: Duration = Duration::from_secs(3);

fn wait(d: Duration) -> LockOptions {
    LockOptions::new().wait(d)
}

/// The next leader state `observer` reports, failing if none comes.
async fn next_leader(observer: &mut LeaderWatch, within: Duration) -> Option<LeaderInfo> {
    tokio::time::timeout(within, observer.changed())
        .await
        .expect("the observer reported nothing")
}

/// Term and value of a leader state.
fn brief(leader: Option<LeaderInfo>) -> Option<(u64, String)> {
    leader.map(|leader| (leader.term.get(), leader.value))
}

// ------------------------------------------------------------ leader child

/// Not a test: the leader run in a child process by the tests below.
/// Prints `LEADER <term>`, then every 50 ms `WRITE <term> <n>` (work done
/// as leader, sent to the parent's fenced resource, numbered from 1) and,
/// once its leadership reports the loss, `lost <reason>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process for the leader fault tests"]
async fn leader_process() {
    let Ok(spec) = std::env::var(LEADER_ENV) else {
        return;
    };
    let mut parts = spec.splitn(3, ' ');
    let (url, name, value) = (parts.next(), parts.next(), parts.next());
    let (Some(url), Some(name), Some(value)) = (url, name, value) else {
        panic!("URL ELECTION VALUE expected");
    };
    let locker = connect(url).await.expect("connect");
    let election = locker.election(name).expect("election");
    let leader = election.campaign(value).await.expect("campaign");
    let term = leader.term().get();
    println!("LEADER {term}");
    for n in 1.. {
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Work first, then look: the first write after a pause is stale,
        // which is exactly what terms are for.
        println!("WRITE {term} {n}");
        if let Some(reason) = leader.loss_signal().loss_reason() {
            println!("lost {reason:?}");
            return;
        }
    }
}

/// A `WRITE <term> <n>` line: term and number.
fn parse_write(line: &str) -> Option<(u64, u64)> {
    let (term, n) = line.strip_prefix("WRITE ")?.split_once(' ')?;
    Some((term.parse().ok()?, n.parse().ok()?))
}

// ------------------------------------------------------------ frozen leader

/// A leader frozen past its ttl is replaced by another candidate (which
/// observers see); when it wakes it is told it lost, and the write it
/// makes with its old term is refused by the fenced resource, while the
/// new leader's writes are accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_leader_is_replaced_and_its_stale_write_refused() {
    let server = single_member("etcd-frozen-leader").await;
    let url = url_for([server.addr()], "2s", "frozen-leader");
    let mut child = Child::spawn("leader_process", LEADER_ENV, &format!("{url} leader old")).await;
    let old_term: u64 = child.expect("LEADER").await.parse().unwrap();
    let resource = FencedResource::new();
    resource.write(old_term, "old leader").unwrap();
    let locker = connect(&url).await.unwrap();
    let election = locker.election("leader").unwrap();
    let mut observer = election.observe();
    assert_eq!(
        brief(next_leader(&mut observer, SLACK).await),
        Some((old_term, "old".to_owned()))
    );

    pause_group(child.pid()).await.unwrap();
    let paused_at = Instant::now();
    let leader = election
        .campaign_with("new", wait(Duration::from_secs(2) + SLACK * 2))
        .await
        .unwrap();
    let new_term = leader.term().get();
    successor_writes(&resource, paused_at, (old_term, new_term), "new leader");
    assert_eq!(
        brief(next_leader(&mut observer, SLACK).await),
        Some((new_term, "new".to_owned()))
    );
    // Everything printed before the pause has been read by now (the
    // child is frozen and the lease has run out since).
    let mut before_pause = 0;
    while let Ok(line) = child.lines.try_recv() {
        if let Some((_, n)) = parse_write(&line) {
            before_pause = before_pause.max(n);
        }
    }

    resume_group(child.pid()).unwrap();
    let mut refused = 0;
    let told = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let line = child.next_line(Duration::from_secs(10)).await;
            if let Some((term, n)) = parse_write(&line) {
                assert_eq!(term, old_term);
                if n > before_pause {
                    let written = resource.write(term, "old leader");
                    assert!(written.is_err(), "the stale leader's write was accepted");
                    refused += 1;
                }
            } else if let Some(reason) = line.strip_prefix("lost ") {
                return reason.to_owned();
            }
        }
    });
    let reason = told.await.expect("the resumed leader was not told it lost");
    assert!(refused >= 1, "the leader made no write after waking");
    assert_eq!(reason, "SessionExpired");
    assert!(leader.is_held());
    resource.write(new_term, "new leader").unwrap();
    assert_eq!(
        resource.last_write(),
        Some((new_term, "new leader".to_owned()))
    );
    let current = election.leader().await.unwrap().expect("a leader");
    assert_eq!(
        (current.term.get(), current.value.as_str()),
        (new_term, "new")
    );
    leader.resign().await.unwrap();
}

// ------------------------------------------------------------ cut observer

/// An observer cut off from the cluster while the leader resigns to a
/// waiting candidate, which then proclaims a new value. Once the network
/// is back the observer reports the current leader: after the whole
/// history it missed, or, if that history was compacted meanwhile, after
/// a fresh read.
async fn observer_cut_off(name: &str, compact: bool) {
    let net = proxied_member(name, "3s", name).await;
    let (a, b) = (
        connect(&net.direct).await.unwrap(),
        connect(&net.direct).await.unwrap(),
    );
    let watcher = connect(&net.through).await.unwrap();
    let mut observer = watcher.election("leader").unwrap().observe();
    assert!(next_leader(&mut observer, SLACK).await.is_none());
    let first = a.election("leader").unwrap().campaign("a").await.unwrap();
    let seen = brief(next_leader(&mut observer, SLACK).await);
    assert_eq!(seen, Some((first.term().get(), "a".to_owned())));
    let candidate = tokio::spawn(async move {
        b.election("leader")
            .unwrap()
            .campaign_with("b", wait(SLACK * 3))
            .await
    });
    let raw = raw_client(&net.direct).await.unwrap();
    let prefix = distlock_testkit::layout::etcd_queue_prefix(&a.name("leader").unwrap());
    eventually(SLACK, "the candidate to queue", || async {
        keys_under(&raw, &prefix)
            .await
            .is_ok_and(|queued| queued == 2)
    })
    .await
    .unwrap();

    net.cut().await;
    first.resign().await.unwrap();
    let second = candidate.await.unwrap().unwrap();
    second.proclaim("b+").await.unwrap();
    if compact {
        let revision = raw.kv_client().get("x", None).await.unwrap();
        let revision = revision.header().unwrap().revision();
        raw.kv_client().compact(revision, None).await.unwrap();
    }
    net.proxy.restore();

    let term = second.term().get();
    let expected = if compact {
        vec![Some((term, "b+".to_owned()))]
    } else {
        vec![Some((term, "b".to_owned())), Some((term, "b+".to_owned()))]
    };
    let mut seen = Vec::new();
    while seen.len() < expected.len() {
        seen.push(brief(next_leader(&mut observer, SLACK * 3).await));
    }
    assert_eq!(seen, expected);
    second.resign().await.unwrap();
    assert!(next_leader(&mut observer, SLACK).await.is_none());
}

/// The observer resumes where it was cut off and reports every change it
/// missed, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_off_observer_catches_up_on_every_change() {
    observer_cut_off("etcd-observer-cut", false).await;
}

/// The history the observer missed is compacted before it comes back: it
/// reads the current leader afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_off_observer_reads_again_after_compaction() {
    observer_cut_off("etcd-observer-compacted", true).await;
}

// ------------------------------------------------------------ server faults

/// Candidates campaigning for one election over and over, each on its own
/// locker, checking in-process that no leader begins while an earlier one
/// still believes it leads, and writing with their terms to a fenced
/// resource; an observer checks that terms never go backwards.
struct Contest {
    state: Arc<Mutex<Leaders>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

#[derive(Default)]
struct Leaders {
    /// The loss signals of the leaders that have not resigned.
    current: Vec<(u64, LossSignal)>,
    /// The term that keeps leading until it loses (others lead 100 ms).
    hold: Option<u64>,
    resource: FencedResource,
    terms: Vec<u64>,
}

impl Contest {
    async fn start(url: &str, candidates: usize) -> Contest {
        let state = Arc::new(Mutex::new(Leaders::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for i in 0..candidates {
            let locker = connect(url).await.unwrap();
            let (state, stop) = (Arc::clone(&state), Arc::clone(&stop));
            tasks.push(tokio::spawn(campaign(locker, i, state, stop)));
        }
        let observer = connect(url).await.unwrap();
        let stop_observing = Arc::clone(&stop);
        tasks.push(tokio::spawn(async move {
            let mut leaders = observer.election("leader").unwrap().observe();
            let mut last = 0;
            while !stop_observing.load(Ordering::SeqCst) {
                let next = tokio::time::timeout(Duration::from_millis(200), leaders.changed());
                if let Ok(Some(leader)) = next.await {
                    assert!(
                        leader.term.get() >= last,
                        "term {} after {last}",
                        leader.term
                    );
                    last = leader.term.get();
                }
            }
        }));
        Contest { state, stop, tasks }
    }

    fn terms(&self) -> usize {
        self.state.lock().unwrap().terms.len()
    }

    /// Waits until `n` more terms began than now.
    async fn more_terms(&self, n: usize, within: Duration) {
        let target = self.terms() + n;
        eventually(within, "more terms", || async { self.terms() >= target })
            .await
            .unwrap();
    }

    async fn finish(self) {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            task.await.unwrap();
        }
        assert_eq!(self.state.lock().unwrap().resource.rejected(), 0);
    }
}

/// One candidate: campaigns, leads for about 100 ms (or, if told to hold
/// its term, until it loses) writing with its term while it holds,
/// resigns; again until told to stop.
async fn campaign(locker: Locker, i: usize, state: Arc<Mutex<Leaders>>, stop: Arc<AtomicBool>) {
    let election = locker.election("leader").unwrap();
    while !stop.load(Ordering::SeqCst) {
        let leader = match election
            .campaign_with(format!("c{i}"), wait(Duration::from_secs(20)))
            .await
        {
            Ok(leader) => leader,
            Err(error) if error.is_retriable() || error.is_timeout() => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(error) => panic!("unexpected error: {error}"),
        };
        let term = leader.term().get();
        {
            let mut state = state.lock().unwrap();
            for (earlier, signal) in &state.current {
                assert!(
                    signal.loss_reason().is_some(),
                    "term {term} began while term {earlier} still led"
                );
            }
            state.current.push((term, leader.loss_signal()));
            state
                .resource
                .write(term, "lead")
                .expect("a new term was refused");
            state.terms.push(term);
        }
        for round in 1.. {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let state = state.lock().unwrap();
            if !leader.is_held() {
                break;
            }
            state
                .resource
                .write(term, "lead")
                .expect("a valid leader was refused");
            if round >= 5 && state.hold != Some(term) {
                break;
            }
        }
        state.lock().unwrap().current.retain(|(t, _)| *t != term);
        let _ = leader.resign().await;
    }
}

/// The single member is killed while a leader leads and comes back only
/// once that leader was told it lost; leadership goes on afterwards, with
/// never two leaders believing they lead at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_never_shows_two_leaders() {
    let server = single_member("etcd-election-restart").await;
    let contest = Contest::start(&url_for([server.addr()], "2s", "restart"), 3).await;
    contest.more_terms(5, SLACK * 3).await;
    // The leader at the kill keeps leading until told it lost.
    let killed_under = eventually(SLACK, "a leader to kill the server under", || async {
        let mut state = contest.state.lock().unwrap();
        let leading = state.current.iter().find(|(_, signal)| signal.is_held());
        let leading = leading.map(|(term, signal)| (*term, signal.clone()));
        if let Some((term, _)) = leading {
            state.hold = Some(term);
            server.stop();
        }
        leading.map(|(_, signal)| signal)
    })
    .await
    .unwrap();
    eventually(
        Duration::from_secs(2) + SLACK,
        "the leader to be told",
        || async { killed_under.loss_reason().is_some() },
    )
    .await
    .unwrap();
    server.restart().await.unwrap();
    contest.more_terms(5, Duration::from_secs(30)).await;
    contest.finish().await;
}

/// The cluster's leader member is killed under campaigning candidates:
/// leadership goes on after the election, never two leaders at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_leader_killed_never_shows_two_leaders() {
    let servers = start_cluster("etcd-election-leader", false).await.unwrap();
    let url = url_for(servers.iter().map(Server::addr), "3s", "cluster-leader");
    let contest = Contest::start(&url, 3).await;
    contest.more_terms(5, SLACK * 3).await;
    servers[leader_index(&servers).await].stop();
    contest.more_terms(10, Duration::from_secs(30)).await;
    contest.finish().await;
}
