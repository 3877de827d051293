//! Cases about holder values and watches: values stored with the lock,
//! and a watch that reports changes of holder, pushed by the store: the
//! current state first, then states in the order they happened, never the
//! same twice in a row, the latest always; every change on stores that
//! declare [`watch_every_change`](crate::backend::Capabilities::watch_every_change).

use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;

use super::*;
use crate::election::LeaderInfo;
use crate::info::LockInfo;
use crate::limits::MAX_VALUE_LEN;
use crate::token::FencingToken;
use crate::watch::HolderWatch;

/// The next state `watch` reports, failing the case if none comes within
/// `within`.
pub(super) async fn next_state(watch: &mut HolderWatch, within: Duration) -> Option<LockInfo> {
    match tokio::time::timeout(within, watch.changed()).await {
        Ok(state) => state,
        Err(_) => panic!(
            "the watch of `{}` reported nothing for {within:?}",
            watch.key()
        ),
    }
}

/// The next state `watch` reports within [`SLACK`], which must be a
/// holder with `token`; `missing` says what a free lock reported means.
async fn next_holder(watch: &mut HolderWatch, token: FencingToken, missing: &str) -> LockInfo {
    let held = next_state(watch, SLACK).await.expect(missing);
    assert_eq!(held.token, token, "another holder reported");
    held
}

/// A value stored with the lock comes back from `inspect` byte for byte
/// (spaces, newlines, whitespace at either end, non-ASCII, the longest
/// allowed); a longer one is refused before anything is sent, and
/// `set_value` replaces it.
pub async fn holder_values_round_trip(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "values", TTL).await?;
    let mut longest = "é".repeat(MAX_VALUE_LEN / 2 - 1);
    longest.push_str("\n!");
    assert_eq!(longest.len(), MAX_VALUE_LEN);
    for value in [
        "10.0.0.7:8080",
        "two words\nand a line",
        " padded at both ends\t\n",
        "",
        longest.as_str(),
    ] {
        let guard = a.lock_with("k", LockOptions::new().value(value)).await?;
        assert_eq!(guard.value(), value);
        let seen = b.inspect("k").await?.expect("held");
        assert_eq!(seen.value, value, "inspect showed another value");
        assert_eq!(seen.token, guard.token());
        guard.set_value("replaced value").await?;
        assert_eq!(b.inspect("k").await?.expect("held").value, "replaced value");
        assert_eq!(guard.value(), "replaced value");
        guard.release().await?;
    }
    let too_long = "x".repeat(MAX_VALUE_LEN + 1);
    let refused = a
        .lock_with("k", LockOptions::new().value(too_long.as_str()))
        .await;
    assert!(
        matches!(refused, Err(LockError::InvalidValue { .. })),
        "a {}-byte value was not refused: {refused:?}",
        MAX_VALUE_LEN + 1
    );
    assert!(
        b.inspect("k").await?.is_none(),
        "a refused lock call took the lock"
    );
    let guard = a.lock("k").await?;
    assert!(matches!(
        guard.set_value(too_long).await,
        Err(LockError::InvalidValue { .. })
    ));
    assert_eq!(b.inspect("k").await?.expect("held").value, "");
    guard.release().await?;
    Ok(Outcome::Passed)
}

/// A watch starts with the current holder, then reports an acquisition
/// (with its token and value), a value change and a release, in order.
pub async fn watch_reports_acquire_and_release(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "watch_plain", TTL).await?;
    let mut watch = b.watch("k")?;
    assert!(
        next_state(&mut watch, SLACK).await.is_none(),
        "a free lock was reported held"
    );
    let guard = a.lock_with("k", LockOptions::new().value("first")).await?;
    let token = guard.token();
    let held = next_holder(&mut watch, token, "the acquisition was not reported").await;
    assert_eq!(held.value, "first");
    assert_eq!(held.owner, guard.owner().as_str());
    guard.set_value("second").await?;
    let changed = next_holder(&mut watch, token, "the value change was reported as free").await;
    assert_eq!(changed.value, "second");
    guard.release().await?;
    assert!(
        next_state(&mut watch, SLACK).await.is_none(),
        "the release was not reported"
    );
    // A watch started on a held lock starts with its holder.
    let guard = a.lock("k").await?;
    let mut late = b.watch("k")?;
    next_holder(&mut late, guard.token(), "the holder was not reported").await;
    guard.release().await?;
    assert!(next_state(&mut late, SLACK).await.is_none());
    Ok(Outcome::Passed)
}

/// A lease that runs out is reported by the watch as a free lock, within
/// the ttl and a margin, although the store announces nothing.
pub async fn watch_reports_expiry(factory: &dyn LockerFactory) -> CaseResult {
    let Some((settings, a, b)) = two_expiring_lockers(factory, "watch_expiry").await? else {
        return Ok(Outcome::NotApplicable(why::NO_LOCK_EXPIRES_ALONE));
    };
    let mut watch = b.watch("k")?;
    assert!(next_state(&mut watch, SLACK).await.is_none());
    let guard = a.lock("k").await?;
    let token = guard.token();
    guard.leak();
    let leaked_at = Instant::now();
    next_holder(&mut watch, token, "the acquisition was not reported").await;
    assert!(
        next_state(&mut watch, settings.ttl + SLACK).await.is_none(),
        "the expired holder was reported again"
    );
    assert!(
        leaked_at.elapsed() + Duration::from_millis(100) >= settings.ttl,
        "the lock was reported free after {:?}, before its ttl",
        leaked_at.elapsed()
    );
    Ok(Outcome::Passed)
}

/// A lock removed from outside is reported free by the watch.
pub async fn watch_reports_a_lock_taken_away(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "watch_taken", TTL).await?;
    let guard = a.lock("k").await?;
    let mut watch = b.watch("k")?;
    next_holder(&mut watch, guard.token(), "the holder was not reported").await;
    let Some(taken) = factory.take_away(&b, "k").await else {
        return Ok(Outcome::NotApplicable(why::NO_FORCE_RELEASE));
    };
    taken?;
    assert!(
        next_state(&mut watch, SLACK).await.is_none(),
        "the removed lock was reported held"
    );
    drop(guard);
    Ok(Outcome::Passed)
}

/// How many lockers take the key in turn (or lead in turn) in the cases
/// about back-to-back changes; each makes three changes.
const IN_TURN: usize = 5;

/// How long after the last change the watch may take to report the lock
/// free: generous, for a re-read on a busy machine.
const FINAL_WITHIN: Duration = Duration::from_secs(10);

/// How long a watch that reported the lock free must stay quiet before
/// the back-to-back cases take what it reported as complete.
const QUIET: Duration = Duration::from_secs(1);

/// A state as the back-to-back cases compare them: the holder's owner,
/// token and value, or `None` (free).
type State = Option<(String, u64, String)>;

fn holder_state(holder: Option<LockInfo>) -> State {
    holder.map(|h| (h.owner, h.token.get(), h.value))
}

fn leader_state(leader: Option<LeaderInfo>) -> State {
    leader.map(|l| (l.owner, l.term.get(), l.value))
}

/// Drives `stream` (a watch whose first state was taken already) in a
/// task, so that it is read while the changes happen, and sends each
/// state it reports, as `state` makes it, on the channel returned.
fn drive<S, T>(
    mut stream: S,
    state: fn(Option<T>) -> State,
) -> (mpsc::UnboundedReceiver<State>, tokio::task::JoinHandle<()>)
where
    S: Stream<Item = Option<T>> + Send + Unpin + 'static,
    T: Send + 'static,
{
    let (states, seen) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        while let Some(next) = stream.next().await {
            if states.send(state(next)).is_err() {
                break;
            }
        }
    });
    (seen, driver)
}

/// What the watch behind `seen` reported, after `observed` (its first
/// state), once it has reported the lock free and then stayed [`QUIET`];
/// on stores where `every_change` is declared, not before it reported as
/// many held states as `actual` has or [`FINAL_WITHIN`] passed. Fails the
/// case if the lock is not reported free within [`FINAL_WITHIN`].
async fn settle(
    seen: &mut mpsc::UnboundedReceiver<State>,
    mut observed: Vec<State>,
    actual: &[State],
    every_change: bool,
) -> Vec<State> {
    let held = |states: &[State]| states.iter().filter(|s| s.is_some()).count();
    let deadline = tokio::time::Instant::now() + FINAL_WITHIN;
    loop {
        let free = observed.last() == Some(&None);
        let done = free && (!every_change || held(&observed) >= held(actual));
        let wait = if done {
            QUIET
        } else {
            deadline.saturating_duration_since(tokio::time::Instant::now())
        };
        match tokio::time::timeout(wait, seen.recv()).await {
            Ok(Some(state)) => observed.push(state),
            Ok(None) => panic!("the watch ended; it reported {observed:#?}"),
            // Complete; or free at the deadline with changes missing,
            // which `check_reported` names.
            Err(_) if free => return observed,
            Err(_) => panic!(
                "the watch did not report the lock free within {FINAL_WITHIN:?} of the last \
                 change\nreported: {observed:#?}\nhappened: {actual:#?}"
            ),
        }
    }
}

/// `observed` without the states a store that merges changes may show of
/// a taker's undone attempt: a held state followed at once by the same
/// owner holding with a higher token (Redlock: a round that reached a
/// majority, then was undone by its taker, who won the next round). A
/// store that declares `every_change` reports real holds only.
fn without_undone_rounds(observed: &[State], every_change: bool) -> Vec<State> {
    let undone = |i: usize| -> bool {
        let (Some(Some((owner, token, _))), Some(Some((next_owner, next_token, _)))) =
            (observed.get(i), observed.get(i + 1))
        else {
            return false;
        };
        !every_change && owner == next_owner && token < next_token
    };
    (0..observed.len())
        .filter(|&i| !undone(i))
        .map(|i| observed[i].clone())
        .collect()
}

/// Checks what a watch reported while the changes `actual` happened back
/// to back (`actual` starts and ends free): the free lock first and last,
/// no state twice in a row, tokens never going back, and only states that
/// happened, in the order they happened. Where the store declares
/// `every_change`, every held state must be there; and where `frees_known`
/// (each holder released before the next took the lock, so `actual` lists
/// every free state) the whole sequence must be.
fn check_reported(observed: &[State], actual: &[State], every_change: bool, frees_known: bool) {
    let shown = || format!("reported: {observed:#?}\nhappened: {actual:#?}");
    assert_eq!(observed.first(), Some(&None), "not free first\n{}", shown());
    assert_eq!(observed.last(), Some(&None), "not free last\n{}", shown());
    for pair in observed.windows(2) {
        assert_ne!(pair[0], pair[1], "a state twice in a row\n{}", shown());
    }
    let tokens: Vec<u64> = observed
        .iter()
        .flatten()
        .map(|(_, token, _)| *token)
        .collect();
    assert!(
        tokens.windows(2).all(|pair| pair[0] <= pair[1]),
        "a token went back\n{}",
        shown()
    );
    let mut rest = actual.iter();
    let settled = without_undone_rounds(observed, every_change);
    for state in &settled {
        assert!(
            rest.any(|happened| happened == state),
            "{state:?} never happened, or not in this order\n{}",
            shown()
        );
    }
    if every_change {
        let held = |states: &[State]| states.iter().flatten().cloned().collect::<Vec<_>>();
        assert_eq!(
            held(observed),
            held(actual),
            "the store declares watch_every_change, but a held state was not reported\n{}",
            shown()
        );
        if frees_known {
            assert_eq!(
                observed,
                actual,
                "the store declares watch_every_change, but a free state was not reported\n{}",
                shown()
            );
        }
    }
}

/// Lockers on their own connections take the key in turn with no pause
/// between changes: each takes it, changes its value and releases it, and
/// the next takes it at once. A watch read all along reports the free
/// lock first and last, then only states that happened, in order, never
/// one twice in a row; on a store that declares `watch_every_change`,
/// every one of them.
pub async fn watch_reports_back_to_back_changes(factory: &dyn LockerFactory) -> CaseResult {
    let settings = settings("watch_back_to_back", TTL);
    let watcher = factory.open(&settings).await?;
    let takers = open_many(factory, &settings, IN_TURN).await?;
    let mut watch = watcher.watch("k")?;
    assert!(
        next_state(&mut watch, SLACK).await.is_none(),
        "a free lock was reported held"
    );
    let (mut seen, driver) = drive(watch, holder_state);
    let mut actual = vec![None];
    for (i, taker) in takers.iter().enumerate() {
        let (first, second) = (format!("taker {i}"), format!("taker {i}, changed"));
        let guard = taker
            .lock_with("k", wait(SLACK).value(first.as_str()))
            .await?;
        let (owner, token) = (guard.owner().to_string(), guard.token().get());
        guard.set_value(second.as_str()).await?;
        guard.release().await?;
        actual.push(Some((owner.clone(), token, first)));
        actual.push(Some((owner, token, second)));
        actual.push(None);
    }
    let every_change = watcher.capabilities().watch_every_change;
    let observed = settle(&mut seen, vec![None], &actual, every_change).await;
    driver.abort();
    check_reported(&observed, &actual, every_change, true);
    Ok(Outcome::Passed)
}

/// Candidates on their own connections queue behind a leader, then each
/// proclaims a new value and resigns as soon as it leads: hand-overs back
/// to back. An observer read all along reports nobody first and last,
/// then only leaders (and values) that happened, in term order, never one
/// twice in a row; on a store that declares `watch_every_change`, every
/// leader and value.
pub async fn observe_reports_back_to_back_leaders(factory: &dyn LockerFactory) -> CaseResult {
    let settings = settings("observe_back_to_back", TTL);
    let observer_locker = factory.open(&settings).await?;
    let candidates = open_many(factory, &settings, IN_TURN).await?;
    let mut observer = observer_locker.election("leader")?.observe();
    match tokio::time::timeout(SLACK, observer.changed()).await {
        Ok(leader) => assert!(leader.is_none(), "a leader before any campaign: {leader:?}"),
        Err(_) => panic!("the observer reported nothing for {SLACK:?}"),
    }
    let (mut seen, driver) = drive(observer, leader_state);
    // Leads, proclaims and resigns at once; what it led with and proclaimed.
    async fn lead_in_turn(
        election: crate::election::Election,
        i: usize,
    ) -> Result<[State; 2], LockError> {
        let (first, second) = (
            format!("candidate {i}"),
            format!("candidate {i}, proclaimed"),
        );
        let leader = election
            .campaign_with(first.as_str(), wait(Duration::from_secs(60)))
            .await?;
        let (owner, term) = (leader.owner().to_string(), leader.term().get());
        leader.proclaim(second.as_str()).await?;
        leader.resign().await?;
        Ok([
            Some((owner.clone(), term, first)),
            Some((owner, term, second)),
        ])
    }
    let first_leader = candidates[0]
        .election("leader")?
        .campaign("candidate 0")
        .await?;
    let mut queued = Vec::new();
    for (i, candidate) in candidates.iter().enumerate().skip(1) {
        queued.push(tokio::spawn(lead_in_turn(candidate.election("leader")?, i)));
    }
    // Time for the candidates to queue, so that the hand-overs follow each
    // other with nothing in between.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let first_led = {
        let (owner, term) = (first_leader.owner().to_string(), first_leader.term().get());
        first_leader.proclaim("candidate 0, proclaimed").await?;
        first_leader.resign().await?;
        [
            Some((owner.clone(), term, "candidate 0".to_owned())),
            Some((owner, term, "candidate 0, proclaimed".to_owned())),
        ]
    };
    let mut terms = vec![first_led];
    for task in queued {
        terms.push(join(task).await?);
    }
    terms.sort_by_key(|[led, _]| led.as_ref().map(|(_, term, _)| *term));
    // Between two leaders the election may or may not have been free for
    // a moment: `actual` has every moment it may have been.
    let mut actual = vec![None];
    for [led, proclaimed] in terms {
        actual.extend([led, proclaimed, None]);
    }
    let every_change = observer_locker.capabilities().watch_every_change;
    let observed = settle(&mut seen, vec![None], &actual, every_change).await;
    driver.abort();
    check_reported(&observed, &actual, every_change, false);
    Ok(Outcome::Passed)
}
