//! Leader election on ZooKeeper under faults, on real servers: a leader
//! process frozen past its session timeout, an observer cut off from the
//! server while the leadership changes, a server restarted and an ensemble
//! member killed under candidates that keep taking turns.
//!
//! The frozen leader runs in a separate process: this test binary run
//! again with `ZK_ELECTION_LEADER_URL` set, executing `leader_process`,
//! which reports on stdout its term, its writes and its loss.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::helper::Helper;
use common::referee::{candidate, observer, Referee};
use common::{local_standalone, SLACK};
use distlock_testkit::zookeeper::{raw_client, standalone_spec, zk_url, Ensemble};
use distlock_testkit::{eventually, pause_group, resume_group, FaultProxy, FencedResource};
use lock_core::{LeaderInfo, LeaderWatch, LockOptions, Locker};
use tokio::time::{sleep, timeout};

const LEADER_URL: &str = "ZK_ELECTION_LEADER_URL";
/// The session timeout of the sessions a test does not mean to lose.
const STEADY_TTL: Duration = Duration::from_secs(8);

/// A URL on `addrs` in a namespace unique to `test`, with session timeout
/// `ttl` (and a connect timeout that outlasts a server restart).
fn url(addrs: &[SocketAddr], test: &str, ttl: Duration) -> String {
    let query = format!(
        "ttl={}ms&connect_timeout=10s&namespace={test}",
        ttl.as_millis()
    );
    zk_url(addrs, "/election-faults", &query)
}

async fn connect(url: &str) -> Locker {
    common::connect(url).await.unwrap()
}

/// The next leader state `observer` reports, within `limit`.
async fn next_leader(observer: &mut LeaderWatch, limit: Duration) -> Option<LeaderInfo> {
    timeout(limit, observer.changed())
        .await
        .unwrap_or_else(|_| panic!("the observer reported nothing within {limit:?}"))
}

/// Not a test: the leader process run by the tests above. Leads election
/// `leader` with value `frozen`, prints `LEADER <term>`, then `WRITE
/// <term>` every 50 ms whether or not it still leads (as a careless leader
/// would), and `lost` once its leadership is reported lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process for the other tests"]
async fn leader_process() {
    let Ok(url) = std::env::var(LEADER_URL) else {
        return;
    };
    let locker = connect(&url).await;
    let election = locker.election("leader").unwrap();
    let leader = election.campaign("frozen").await.unwrap();
    println!("LEADER {}", leader.term());
    let signal = leader.loss_signal();
    tokio::spawn(async move {
        signal.lost().await;
        println!("lost");
    });
    loop {
        println!("WRITE {}", leader.term());
        sleep(Duration::from_millis(50)).await;
    }
}

/// A leader frozen (SIGSTOP) past its session timeout is replaced by the
/// candidate waiting behind it, which observers see; resumed, it is told
/// it lost, and the writes it still makes with its old term are refused by
/// a fencing-checked resource that accepted the new leader's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_is_replaced_told_it_lost_and_fenced_off() {
    let ttl = Duration::from_secs(1);
    let server = local_standalone().await;
    // Only the leader to freeze has a short session.
    let short = url(&[server], "frozen_leader", ttl);
    let url = url(&[server], "frozen_leader", STEADY_TTL);
    let resource = FencedResource::new();
    let mut frozen = Helper::start("leader_process", &[(LEADER_URL, short.as_str())]).await;
    let old_term: u64 = frozen.expect("LEADER ", SLACK * 4).await.parse().unwrap();
    let written: u64 = frozen.expect("WRITE ", SLACK).await.parse().unwrap();
    resource.write(written, "old leader").unwrap();

    let (observing, campaigning) = (connect(&url).await, connect(&url).await);
    let election = observing.election("leader").unwrap();
    let mut leaders = election.observe();
    let seen = next_leader(&mut leaders, SLACK).await.expect("a leader");
    assert_eq!((seen.term.get(), seen.value.as_str()), (old_term, "frozen"));
    let next = tokio::spawn(async move {
        let election = campaigning.election("leader").unwrap();
        let options = LockOptions::new().wait(ttl + SLACK * 2);
        election.campaign_with("next", options).await
    });

    pause_group(frozen.pid).await.unwrap();
    let next = timeout(ttl + SLACK * 3, next)
        .await
        .expect("the candidate never led")
        .unwrap()
        .expect("the candidate did not replace the frozen leader");
    assert!(next.term().get() > old_term);
    resource.write(next.term().get(), "new leader").unwrap();
    loop {
        match next_leader(&mut leaders, SLACK).await {
            Some(leader) if leader.term == next.term() => {
                assert_eq!(leader.value, "next");
                break;
            }
            Some(leader) => assert_eq!(leader.term.get(), old_term, "an unknown leader"),
            None => {}
        }
    }

    frozen.skip_printed();
    resume_group(frozen.pid).unwrap();
    // Its writes until it learns it lost, and the first one after.
    let mut attempted = Vec::new();
    let mut told = false;
    loop {
        let line = frozen.expect("", SLACK).await;
        if line == "lost" {
            told = true;
        } else if let Some(term) = line.strip_prefix("WRITE ") {
            attempted.push(term.parse::<u64>().unwrap());
            if told {
                break;
            }
        }
    }
    for term in attempted {
        assert_eq!(term, old_term);
        assert!(
            resource.write(term, "old leader, resumed").is_err(),
            "a write with the old term was accepted"
        );
    }
    assert_eq!(
        resource.last_write(),
        Some((next.term().get(), "new leader".to_owned()))
    );
    assert!(next.is_held());
    let now = election.leader().await.unwrap().expect("a leader");
    assert_eq!((now.term, now.value.as_str()), (next.term(), "next"));
    next.resign().await.unwrap();
}

/// An observer connected through a proxy that is cut while the leadership
/// changes, then restored, resumes with the leader of the moment, and
/// follows it on: after a short cut (its session survives and the client
/// sets its watch again) and after a cut that outlasts its session (the
/// watch opens a new one). The observer's session times out after `ttl`.
async fn observer_cut_off_while_the_leadership_changes(test: &str, ttl: Duration, expire: bool) {
    let server = local_standalone().await;
    let proxy = FaultProxy::start(server).unwrap();
    let cut_off = connect(&url(&[proxy.addr()], test, ttl)).await;
    let (a, b) = (
        connect(&url(&[server], test, STEADY_TTL)).await,
        connect(&url(&[server], test, STEADY_TTL)).await,
    );
    // A lock of the observer's session, to see when the session ends.
    let marker = cut_off.lock("marker").await.unwrap();
    let mut leaders = cut_off.election("leader").unwrap().observe();
    assert!(next_leader(&mut leaders, SLACK).await.is_none());
    let first = a
        .election("leader")
        .unwrap()
        .campaign("first")
        .await
        .unwrap();
    let seen = next_leader(&mut leaders, SLACK)
        .await
        .expect("the first leader");
    assert_eq!(seen.term, first.term());

    proxy.cut();
    first.resign().await.unwrap();
    let second = b.election("leader").unwrap().campaign("second").await;
    let second = second.unwrap();
    if expire {
        let raw = raw_client(&[server]).await.unwrap();
        let dir = distlock_testkit::layout::zk_lock_dir(
            "/election-faults",
            &cut_off.name("marker").unwrap(),
        );
        eventually(ttl + SLACK, "the cut-off session to expire", || async {
            raw.list_children(&dir).await.is_ok_and(|c| c.is_empty())
        })
        .await
        .unwrap();
    }
    proxy.restore();

    let seen = next_leader(&mut leaders, ttl + SLACK * 2)
        .await
        .expect("the observer resumed with no leader");
    assert_eq!(
        (seen.term, seen.value.as_str(), seen.owner.as_str()),
        (second.term(), "second", second.owner().as_str())
    );
    assert_eq!(
        marker.is_held(),
        !expire,
        "{:?}",
        marker.loss_signal().loss_reason()
    );
    second.proclaim("second, moved").await.unwrap();
    let seen = next_leader(&mut leaders, SLACK)
        .await
        .expect("the proclaim");
    assert_eq!(
        (seen.term, seen.value.as_str()),
        (second.term(), "second, moved")
    );
    second.resign().await.unwrap();
    assert!(next_leader(&mut leaders, SLACK).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_briefly_cut_off_resumes_with_the_current_leader() {
    observer_cut_off_while_the_leadership_changes("observer_cut", STEADY_TTL, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_whose_session_expired_resumes_with_the_current_leader() {
    observer_cut_off_while_the_leadership_changes("observer_expired", Duration::from_secs(1), true)
        .await;
}

/// Three candidates, each on its own session, on `urls` in turn, and an
/// observer on the first URL.
async fn referee_election(urls: &[String]) -> (Arc<Referee>, Vec<tokio::task::JoinHandle<()>>) {
    let referee = Arc::new(Referee::default());
    let mut tasks = Vec::new();
    for (i, url) in urls.iter().cycle().take(3).enumerate() {
        let locker = connect(url).await;
        tasks.push(candidate(
            locker,
            format!("candidate-{i}"),
            Arc::clone(&referee),
        ));
    }
    tasks.push(observer(connect(&urls[0]).await, Arc::clone(&referee)));
    (referee, tasks)
}

/// A standalone server killed and restarted while candidates take turns:
/// never two valid leaders at once, terms only go up, and the turns go on
/// once the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_never_makes_two_leaders() {
    let ttl = Duration::from_secs(3);
    let server = standalone_spec().unwrap().start().await.unwrap();
    let url = url(&[server.addr()], "restart", ttl);
    let (referee, tasks) = referee_election(&[url]).await;
    referee.wait_for_terms(10, SLACK * 2).await;
    server.restart().await.unwrap();
    referee.wait_for_terms(10, ttl + SLACK * 4).await;
    referee.finish();
    tasks.iter().for_each(|task| task.abort());
}

/// In a 3-server ensemble, the ZooKeeper leader killed while candidates
/// (connected to every member) take turns: never two valid leaders at
/// once, terms only go up, and the turns go on under the new quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensemble_leader_killed_never_makes_two_leaders() {
    let ttl = Duration::from_secs(3);
    let ensemble = Ensemble::start(3).await.unwrap_or_else(|e| panic!("{e}"));
    // The observer and one candidate may move to any member; the other
    // two candidates are tied to one member each, and lose their session
    // if it is the one killed.
    let mut urls = vec![url(&ensemble.client_addrs(), "ensemble", ttl)];
    urls.extend((0..2).map(|i| url(&[ensemble.client_addr(i)], "ensemble", ttl)));
    let (referee, tasks) = referee_election(&urls).await;
    referee.wait_for_terms(10, SLACK * 2).await;
    let leader = ensemble.leader().await.expect("a ZooKeeper leader");
    ensemble.members[leader].stop();
    referee.wait_for_terms(10, ttl + SLACK * 6).await;
    referee.finish();
    tasks.iter().for_each(|task| task.abort());
}
