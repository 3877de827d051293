//! Cases about leader election: one leader at a time, terms that only go
//! up, observers that see leaders in order, hand-over on resign and on a
//! leader that stops renewing.

use super::watch::next_state;
use super::*;
use crate::election::{LeaderInfo, LeaderWatch};
use crate::token::FencingToken;

/// The next leader state `observer` reports, failing the case if none
/// comes within `within`.
async fn next_leader(observer: &mut LeaderWatch, within: Duration) -> Option<LeaderInfo> {
    match tokio::time::timeout(within, observer.changed()).await {
        Ok(state) => state,
        Err(_) => panic!("the observer reported nothing for {within:?}"),
    }
}

/// The next leader `observer` reports within [`SLACK`], which must be in
/// `term` with `value`; `missing` says what no leader reported means.
async fn next_leader_is(
    observer: &mut LeaderWatch,
    (term, value): (FencingToken, &str),
    missing: &str,
) -> LeaderInfo {
    let seen = next_leader(observer, SLACK).await.expect(missing);
    assert_eq!((seen.term, seen.value.as_str()), (term, value));
    seen
}

/// Eight candidates on their own lockers campaign, lead briefly and resign,
/// several times each: never two leaders at once (checked in-process), every
/// term greater than the one before.
pub async fn election_has_one_leader_at_a_time(factory: &dyn LockerFactory) -> CaseResult {
    const CANDIDATES: usize = 8;
    const TERMS_EACH: usize = 3;
    let settings = settings("one_leader", TTL);
    let leading = Arc::new(AtomicBool::new(false));
    let last_term = Arc::new(Mutex::new(0u64));
    let mut tasks = Vec::new();
    for (i, locker) in open_many(factory, &settings, CANDIDATES)
        .await?
        .into_iter()
        .enumerate()
    {
        let (leading, last_term) = (leading.clone(), last_term.clone());
        tasks.push(tokio::spawn(async move {
            let election = locker.election("leader")?;
            for round in 0..TERMS_EACH {
                let value = format!("candidate-{i}-{round}");
                let leader = election
                    .campaign_with(value.as_str(), wait(Duration::from_secs(60)))
                    .await?;
                assert!(!leading.swap(true, Ordering::SeqCst), "two leaders at once");
                assert_rises(&last_term, leader.term().get(), "term");
                assert_eq!(leader.value(), value);
                tokio::time::sleep(Duration::from_millis(5)).await;
                leading.store(false, Ordering::SeqCst);
                leader.resign().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    join_all(tasks).await?;
    Ok(Outcome::Passed)
}

/// An observer starts with the current leader, then sees each of a run of
/// successive leaders in order: none skipped, no term going backwards.
/// The leaders are 150 ms apart, longer than one re-read on every store,
/// so even a store whose watch may merge changes reports each; leaders
/// back to back are [`observe_reports_back_to_back_leaders`].
pub async fn observe_sees_every_leader_in_order(factory: &dyn LockerFactory) -> CaseResult {
    const LEADERS: usize = 5;
    let (_, a, b) = two_lockers(factory, "observe_order", TTL).await?;
    let first = a.election("leader")?.campaign("leader-0").await?;
    let mut observer = b.election("leader")?.observe();
    let seen = next_leader_is(
        &mut observer,
        (first.term(), "leader-0"),
        "the current leader was not reported",
    )
    .await;
    let mut terms = vec![first.term()];
    let leaders = {
        let election = a.election("leader")?;
        tokio::spawn(async move {
            first.resign().await?;
            let mut terms = Vec::new();
            for i in 1..LEADERS {
                let leader = election.campaign(format!("leader-{i}")).await?;
                terms.push(leader.term());
                // Long enough for any store to deliver the change; short
                // enough that leaders follow each other quickly.
                tokio::time::sleep(Duration::from_millis(150)).await;
                leader.resign().await?;
            }
            Ok::<_, LockError>(terms)
        })
    };
    let mut observed = Vec::new();
    let mut last_term = seen.term;
    while observed.len() < LEADERS - 1 {
        let Some(leader) = next_leader(&mut observer, SLACK).await else {
            continue;
        };
        assert!(
            leader.term >= last_term,
            "term {} after {last_term}",
            leader.term
        );
        if leader.term > last_term {
            observed.push((leader.term, leader.value.clone()));
        }
        last_term = leader.term;
    }
    terms.extend(join(leaders).await?);
    let expected: Vec<_> = terms[1..]
        .iter()
        .enumerate()
        .map(|(i, term)| (*term, format!("leader-{}", i + 1)))
        .collect();
    assert_eq!(
        observed, expected,
        "the observer did not see every leader in order"
    );
    assert!(
        next_leader(&mut observer, SLACK).await.is_none(),
        "the last resign was not seen"
    );
    Ok(Outcome::Passed)
}

/// `proclaim` changes the leader's value, keeping its term, as seen by
/// `leader()` and by observers.
pub async fn proclaim_reaches_leader_and_observers(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "proclaim", TTL).await?;
    let leader = a.election("leader")?.campaign("10.0.0.7:8080").await?;
    let election = b.election("leader")?;
    let mut observer = election.observe();
    let seen = next_leader(&mut observer, SLACK)
        .await
        .expect("no leader seen");
    assert_eq!(seen.value, "10.0.0.7:8080");
    leader.proclaim("10.0.0.7:9090").await?;
    assert_eq!(leader.value(), "10.0.0.7:9090");
    let now = election.leader().await?.expect("no leader");
    assert_eq!(
        (now.term, now.value.as_str()),
        (leader.term(), "10.0.0.7:9090")
    );
    assert_eq!(now.owner, leader.owner().as_str());
    next_leader_is(
        &mut observer,
        (leader.term(), "10.0.0.7:9090"),
        "the proclaim was seen as no leader",
    )
    .await;
    leader.resign().await?;
    Ok(Outcome::Passed)
}

/// A leader that stops renewing is replaced by a waiting candidate within
/// the ttl and a margin; it is told it lost, and observers see the new
/// leader.
pub async fn stalled_leader_is_replaced_after_ttl(factory: &dyn LockerFactory) -> CaseResult {
    let Some((settings, a, b)) = two_expiring_lockers(factory, "stalled_leader").await? else {
        return Ok(Outcome::NotApplicable(why::NO_LOCK_EXPIRES_ALONE));
    };
    let observer_locker = factory.open(&settings).await?;
    let stalled = a
        .election("leader")?
        .campaign_with("stalled", LockOptions::new().auto_renew(false))
        .await?;
    let stalled_at = Instant::now();
    let mut observer = observer_locker.election("leader")?.observe();
    assert_eq!(
        next_leader(&mut observer, SLACK).await.map(|l| l.term),
        Some(stalled.term())
    );
    let next = b
        .election("leader")?
        .campaign_with("next", wait(settings.ttl + SLACK))
        .await?;
    assert!(
        stalled_at.elapsed() < settings.ttl + SLACK,
        "the stalled leader was replaced only after {:?}",
        stalled_at.elapsed()
    );
    assert!(
        !stalled.is_held(),
        "the stalled leader was not told before the next one led"
    );
    assert!(next.term() > stalled.term());
    loop {
        let leader = next_leader(&mut observer, SLACK).await;
        match leader {
            Some(leader) if leader.term == next.term() => break,
            Some(leader) => assert_eq!(leader.term, stalled.term(), "an unknown leader"),
            None => {}
        }
    }
    assert!(matches!(
        stalled.resign().await,
        Err(LockError::Lost { .. })
    ));
    next.resign().await?;
    Ok(Outcome::Passed)
}

/// `resign` hands over to a waiting candidate at once, through the store's
/// notification rather than a poll or the ttl.
pub async fn resign_hands_over_promptly(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "resign", TTL).await?;
    let leader = a.election("leader")?.campaign("first").await?;
    let candidate = {
        let election = b.election("leader")?;
        tokio::spawn(async move {
            let leader = election
                .campaign_with("second", wait(Duration::from_secs(30)))
                .await?;
            let led_at = Instant::now();
            Ok::<_, LockError>((leader, led_at))
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!candidate.is_finished(), "the candidate did not wait");
    leader.resign().await?;
    let resigned_at = Instant::now();
    let (next, led_at) = join(candidate).await?;
    let handover = led_at.saturating_duration_since(resigned_at);
    assert!(
        handover < Duration::from_millis(500),
        "hand-over took {handover:?}"
    );
    assert_eq!(next.value(), "second");
    next.resign().await?;
    Ok(Outcome::Passed)
}

/// A campaign cancelled while waiting (its future dropped, or its wait run
/// out) leaves nothing behind: after the leader resigns, nobody leads, and
/// a later candidate leads at once.
pub async fn cancelled_campaign_leaves_nothing_behind(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "cancelled_campaign", TTL).await?;
    let election = b.election("leader")?;
    let leader = a.election("leader")?.campaign("leader").await?;
    let dropped = election.campaign("dropped");
    let returned = "a campaign on a led election returned";
    assert_still_waiting(dropped, Duration::from_millis(300), returned).await;
    let timed_out = election
        .campaign_with("timed out", wait(Duration::from_millis(300)))
        .await;
    assert_timed_out(&timed_out);
    leader.resign().await?;
    let mut observer = election.observe();
    let seen = next_leader(&mut observer, SLACK).await;
    assert!(seen.is_none(), "a cancelled candidate leads: {seen:?}");
    let started = Instant::now();
    let next = election.campaign_with("next", wait(SLACK)).await?;
    assert!(started.elapsed() < SLACK);
    next.resign().await?;
    Ok(Outcome::Passed)
}

/// An election nobody campaigned in has no leader, and its observer says so
/// first.
pub async fn empty_election_has_no_leader(factory: &dyn LockerFactory) -> CaseResult {
    let (_, _, b) = two_lockers(factory, "empty_election", TTL).await?;
    let election = b.election("nobody")?;
    assert!(election.leader().await?.is_none());
    let mut watch = b.watch("nobody")?;
    assert!(next_state(&mut watch, SLACK).await.is_none());
    assert!(next_leader(&mut election.observe(), SLACK).await.is_none());
    Ok(Outcome::Passed)
}
