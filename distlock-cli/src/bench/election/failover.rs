//! Failover after resign: the next candidate leading after the leader
//! resigns; and the pieces the crash failover shares with it.

use std::time::{Duration, Instant};

use distlock::{Election, Leadership, LockError, LockOptions, Locker};

use super::{describe, floor_sample, more_samples, open, within, Failover, Task, PATIENCE};
use crate::bench::floor::FloorProbe;
use crate::bench::measure::WAITER_SETTLE;
use crate::bench::opener::Opener;

/// The election of the resign failover.
const FAILOVER_KEY: &str = "bench/election-failover";
/// Where its floor writes (the same shape, never the same key).
const FLOOR_KEY: &str = "bench/election-failover-raw";
/// Beyond a step's own wait, how long to give a store that ignores it.
const SLACK: Duration = Duration::from_secs(5);

/// A candidate campaigning in the background: when it led, and how.
pub(super) type Candidate = Task<(Instant, Result<Leadership, LockError>)>;

/// Starts `election.campaign_with(value)`, waiting at most `wait`.
pub(super) fn candidate(election: &Election, value: String, wait: Duration) -> Candidate {
    let election = election.clone();
    Task::spawn(async move {
        let led = election
            .campaign_with(value, LockOptions::new().wait(wait))
            .await;
        (Instant::now(), led)
    })
}

/// Waits for `candidate` to lead: its leadership and when it began.
pub(super) async fn led(
    mut candidate: Candidate,
    wait: Duration,
    after: &'static str,
) -> Result<(Instant, Leadership), String> {
    let not_led = || format!("the waiting candidate did not lead after {after}");
    let (at, led) = within(wait + SLACK, not_led, candidate.join()).await?;
    match led {
        Ok(leadership) => Ok((at, leadership)),
        Err(error) if error.is_timeout() => Err(format!(
            "{} within {}",
            not_led(),
            humantime::format_duration(wait)
        )),
        Err(error) => Err(format!("campaign: {}", describe(&error))),
    }
}

/// From the leader's `resign()` returning (and from its call) to the
/// waiting candidate's `campaign()` returning, two lockers taking turns,
/// each sample followed by one raw lock+release of the floor. Adds the
/// samples to `row` as they are taken.
pub(super) async fn after_resign(
    opener: &Opener,
    probe: Option<&dyn FloorProbe>,
    budget: Duration,
    row: &mut Failover,
) -> Result<(), String> {
    let lockers = [open(opener).await?, open(opener).await?];
    let elections = [
        election(&lockers[0], FAILOVER_KEY)?,
        election(&lockers[1], FAILOVER_KEY)?,
    ];
    let floor_name = lockers[0].name(FLOOR_KEY).map_err(|e| describe(&e))?;
    let first = candidate(&elections[0], "candidate-0".to_owned(), PATIENCE);
    let (_, mut leader) = led(first, PATIENCE, "the election was free").await?;
    let mut leading = 0;
    let started = Instant::now();
    while more_samples(row.handovers.len(), started.elapsed(), budget) {
        let next = 1 - leading;
        let waiting = candidate(&elections[next], format!("candidate-{next}"), PATIENCE);
        tokio::time::sleep(WAITER_SETTLE).await;
        let resigning = Instant::now();
        leader
            .resign()
            .await
            .map_err(|e| format!("resign: {}", describe(&e)))?;
        let resigned = Instant::now();
        let (led_at, leadership) = led(waiting, PATIENCE, "the leader resigned").await?;
        row.handovers.record(resigning, resigned, led_at);
        leader = leadership;
        leading = next;
        if let Some(probe) = probe {
            floor_sample(&mut row.floor, probe.lock_release_once(&floor_name)).await?;
            let handed = probe.handoff_once(&floor_name).await;
            if let Some(handed) = handed.map_err(|e| format!("floor probe: {}", describe(&e)))? {
                row.handoff_floor.push(handed);
            }
        }
    }
    leader
        .resign()
        .await
        .map_err(|e| format!("resign: {}", describe(&e)))
}

pub(super) fn election(locker: &Locker, name: &str) -> Result<Election, String> {
    locker.election(name).map_err(|e| describe(&e))
}
