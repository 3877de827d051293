//! Observe latency: how long a change of leader or of its value takes to
//! reach every one of [`OBSERVERS`] observers.

use std::time::{Duration, Instant};

use distlock::{LockName, LockOptions};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::{describe, floor_sample, more_samples, open, within, Observe, RawNotify, Task};
use crate::bench::floor::{FloorProbe, NotifyProbe};
use crate::bench::opener::Opener;

/// Observers waiting on the election at once.
pub(crate) const OBSERVERS: usize = 16;
/// The election observed.
const OBSERVE_KEY: &str = "bench/election-observe";
/// Where the floor reads (the same shape, never the same key).
const FLOOR_KEY: &str = "bench/election-observe-raw";

/// What an observer sees: the leader's term and value, `None` while
/// nobody leads.
type State = Option<(u64, String)>;

/// One state an observer received, and when.
#[derive(Debug)]
struct Seen {
    observer: usize,
    at: Instant,
    state: State,
}

/// The observe test: each round elects a leader (measured from
/// `campaign()` returning), has it proclaim a new value (measured from
/// `proclaim()` returning) and resign (not measured, but every observer
/// must see it before the next round). Each measured change is followed by
/// one raw round trip of the floor and one change of its raw notify
/// recipe, if any. Adds the samples to `row` as they are taken.
pub(super) async fn observe(
    opener: &Opener,
    probe: Option<&dyn FloorProbe>,
    budget: Duration,
    patience: Duration,
    row: &mut Observe,
) -> Result<(), String> {
    let leader_locker = open(opener).await?;
    let election = leader_locker
        .election(OBSERVE_KEY)
        .map_err(|e| describe(&e))?;
    let floor_name = leader_locker.name(FLOOR_KEY).map_err(|e| describe(&e))?;
    let floor = probe.map(|probe| (probe, &floor_name));
    let mut raw = open_raw_notify(probe, &floor_name, row).await?;
    let (seen, received) = mpsc::unbounded_channel();
    // Aborted (their watches dropped) when this function returns.
    let _observers = spawn_observers(opener, seen).await?;
    let mut board = Board { received, patience };
    board.arrivals(&None, "the current leader (none)").await?;

    let started = Instant::now();
    let mut round = 0u64;
    while more_samples(row.all.len(), started.elapsed(), budget) {
        let value = format!("leader-{round}");
        let leader = election
            .campaign_with(value.clone(), LockOptions::new().wait(patience))
            .await
            .map_err(|e| format!("campaign: {}", describe(&e)))?;
        let elected = Instant::now();
        let term = leader.term().get();
        let new_leader = Some((term, value));
        board
            .measure(row, floor, elected, &new_leader, "the new leader")
            .await?;
        raw_sample(raw.as_deref_mut(), row, patience).await?;

        let value = format!("proclaimed-{round}");
        leader
            .proclaim(value.clone())
            .await
            .map_err(|e| format!("proclaim: {}", describe(&e)))?;
        let proclaimed = Instant::now();
        let new_value = Some((term, value));
        board
            .measure(row, floor, proclaimed, &new_value, "the proclaimed value")
            .await?;
        raw_sample(raw.as_deref_mut(), row, patience).await?;

        leader
            .resign()
            .await
            .map_err(|e| format!("resign: {}", describe(&e)))?;
        board.arrivals(&None, "the resignation").await?;
        round += 1;
    }
    Ok(())
}

/// The floor's raw notify recipe beside `floor_name`, if the store has
/// one; its row is added to `row`.
async fn open_raw_notify(
    probe: Option<&dyn FloorProbe>,
    floor_name: &LockName,
    row: &mut Observe,
) -> Result<Option<Box<dyn NotifyProbe>>, String> {
    let raw = match probe {
        Some(probe) => probe
            .open_notify(floor_name, OBSERVERS)
            .await
            .map_err(|e| format!("floor probe: {}", describe(&e)))?,
        None => None,
    };
    row.raw_notify = raw.as_ref().map(|raw| RawNotify {
        what: raw.describe(),
        ..RawNotify::default()
    });
    Ok(raw)
}

/// [`OBSERVERS`] observers of the election, each on a locker of its own,
/// sending what they see to `seen`. Dropping the tasks aborts them.
async fn spawn_observers(
    opener: &Opener,
    seen: mpsc::UnboundedSender<Seen>,
) -> Result<Vec<Task<()>>, String> {
    let mut observers = Vec::with_capacity(OBSERVERS);
    for observer in 0..OBSERVERS {
        let locker = open(opener).await?;
        let mut leaders = locker
            .election(OBSERVE_KEY)
            .map_err(|e| describe(&e))?
            .observe();
        let seen = seen.clone();
        observers.push(Task::spawn(async move {
            let _connection = locker;
            while let Some(leader) = leaders.next().await {
                let state = leader.map(|l| (l.term.get(), l.value));
                let at = Instant::now();
                if seen
                    .send(Seen {
                        observer,
                        at,
                        state,
                    })
                    .is_err()
                {
                    break;
                }
            }
        }));
    }
    Ok(observers)
}

impl Observe {
    /// Adds the latencies of one change committed at `committed` that the
    /// observers received at `arrivals`. An observer may hear of a change
    /// before the call that made it returns; that took no time from the
    /// caller's view.
    fn record(&mut self, committed: Instant, arrivals: &[Instant]) {
        let latencies = arrivals
            .iter()
            .map(|at| at.saturating_duration_since(committed));
        let before = self.each.len();
        self.each.extend(latencies);
        if let Some(slowest) = self.each[before..].iter().max() {
            self.all.push(*slowest);
        }
    }
}

/// One change of the raw notify recipe `raw`, if any, within `patience`,
/// added to `row`.
async fn raw_sample(
    raw: Option<&mut (dyn NotifyProbe + 'static)>,
    row: &mut Observe,
    patience: Duration,
) -> Result<(), String> {
    let (Some(raw), Some(samples)) = (raw, row.raw_notify.as_mut()) else {
        return Ok(());
    };
    let what = || "the raw watchers did not all re-read a change".to_owned();
    let step = async {
        raw.notify_once()
            .await
            .map_err(|e| format!("floor probe: {}", describe(&e)))
    };
    let heard = within(patience, what, step).await?;
    let (events, rereads): (Vec<_>, Vec<_>) = heard.into_iter().unzip();
    samples.event_all.extend(events.iter().max());
    samples.event_each.extend(events);
    samples.all.extend(rereads.iter().max());
    samples.each.extend(rereads);
    Ok(())
}

/// What the observers report, as it arrives.
struct Board {
    received: mpsc::UnboundedReceiver<Seen>,
    /// How long every observer gets to see one change.
    patience: Duration,
}

impl Board {
    /// One measured change, committed at `committed`: waits until every
    /// observer has it ([`arrivals`](Self::arrivals)), adds the latencies
    /// to `row`, then one raw round trip of `floor` (the probe and the
    /// floor's key), if any.
    async fn measure(
        &mut self,
        row: &mut Observe,
        floor: Option<(&dyn FloorProbe, &LockName)>,
        committed: Instant,
        expected: &State,
        what: &str,
    ) -> Result<(), String> {
        let arrivals = self.arrivals(expected, what).await?;
        row.record(committed, &arrivals);
        if let Some((probe, name)) = floor {
            floor_sample(&mut row.floor, probe.round_trip_once(name)).await?;
        }
        Ok(())
    }

    /// Waits until every observer has received `expected` (described as
    /// `what`), at most the patience; returns when each received it.
    /// States before it are skipped: the caller waited for every observer
    /// to see the previous change before making this one.
    async fn arrivals(&mut self, expected: &State, what: &str) -> Result<Vec<Instant>, String> {
        let deadline = tokio::time::Instant::now() + self.patience;
        let mut arrived: Vec<Option<Instant>> = vec![None; OBSERVERS];
        let mut missing = OBSERVERS;
        while missing > 0 {
            match tokio::time::timeout_at(deadline, self.received.recv()).await {
                Ok(Some(seen)) => {
                    let slot = &mut arrived[seen.observer];
                    if slot.is_none() && seen.state == *expected {
                        *slot = Some(seen.at);
                        missing -= 1;
                    }
                }
                Ok(None) => return Err("every observer's watch ended".to_owned()),
                Err(_) => return Err(self.too_slow(missing, what)),
            }
        }
        Ok(arrived.into_iter().flatten().collect())
    }

    fn too_slow(&self, missing: usize, what: &str) -> String {
        let hint = if missing == OBSERVERS {
            " (none did: does the store's watch deliver anything?)"
        } else {
            ""
        };
        format!(
            "{missing} of {OBSERVERS} observers did not see {what} within {}{hint}",
            humantime::format_duration(self.patience)
        )
    }
}
