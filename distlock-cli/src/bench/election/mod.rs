//! The election benchmark: how fast leadership moves and how fast
//! observers hear of it, each beside a raw floor measured in the same run.
//!
//! - Failover after resign ([`failover::after_resign`]): from the leader's
//!   `resign()` returning to the waiting candidate's `campaign()`
//!   returning; the two lockers swap roles every sample. Floor: the
//!   store's raw lock+release ([`FloorProbe::lock_release_once`]), two raw
//!   round trips: the least a hand-over costs is the store telling the
//!   candidate (half a round trip) and the candidate's own write.
//! - Failover after a crash ([`crash::after_crash`]): while a candidate
//!   waits, the leader's guard is leaked (renewal stops, nothing is
//!   released, as if its process had died) or, on stores whose locks last
//!   as long as a session or process, the leader's `distlock elect`
//!   process is killed; from the crash to the candidate's `campaign()`
//!   returning. Its floor is the ttl ([`CRASH_TTL`]) where the store frees
//!   the lock by expiry, none where the process's end frees it.
//! - Observe latency ([`observe::observe`]): [`OBSERVERS`] observers, each
//!   on its own locker (connection) unless the bench is `--shared`, wait
//!   in `observe()`; a leader is elected or proclaims a new value, and
//!   from that call returning until each observer has the new state.
//!   Floor: one raw round trip ([`FloorProbe::round_trip_once`]); on a
//!   store whose watches carry no data, also the raw recipe of the same
//!   step ([`FloorProbe::open_notify`]): as many raw watchers, each
//!   re-reading once its watch fires, sampled after each of ours.
//!
//! Every wait has a deadline: a store whose watch delivers nothing, or
//! whose candidates are never woken, fails its row with a message saying
//! so (and the bench exits 1 after printing everything it measured).

mod crash;
mod failover;
mod observe;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::floor::FloorProbe;
use super::opener::Opener;
use super::stats::Handovers;

pub(crate) use crash::CRASH_TTL;
pub(crate) use observe::OBSERVERS;

/// Most samples of the resign failover and of the observe test.
const MAX_SAMPLES: usize = 200;
/// Fewest samples of either, however long they take.
const MIN_SAMPLES: usize = 10;
/// How long any one step (a campaign, a change reaching every observer)
/// may take before its row fails: far beyond any working store.
const PATIENCE: Duration = Duration::from_secs(10);

/// The resign failover row, beside its floor.
#[derive(Debug, Default)]
pub(crate) struct Failover {
    /// The hand-overs (those measured before a failure, if any): from
    /// `resign()` being called (the whole hand-over, the store's delete
    /// included, which is what the floor's two round trips match) and
    /// from its return (a store may tell the candidate before the leader
    /// hears back: those are counted apart).
    pub(crate) handovers: Handovers,
    /// The floor's samples, one after each of ours.
    pub(crate) floor: Vec<Duration>,
    /// The raw hand-off's samples, one after each of ours, where the store
    /// has one ([`FloorProbe::handoff_once`]).
    pub(crate) handoff_floor: Vec<Duration>,
    /// What went wrong; the row then stops at the samples it has.
    pub(crate) error: Option<String>,
}

/// How the crash failover's leader crashes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum CrashKind {
    /// Its guard is leaked in this process: the store has per-lock leases.
    #[default]
    LeakedGuard,
    /// Its `distlock elect` process is killed: the store's locks last as
    /// long as the session or process that took them.
    KilledProcess,
}

/// The crash failover row.
#[derive(Debug, Default)]
pub(crate) struct Crash {
    pub(crate) kind: CrashKind,
    /// From the crash (leak or kill) to the candidate leading.
    pub(crate) from_crash: Vec<Duration>,
    /// For leaked guards, from the holder's lock call (the start of its
    /// lease) to the candidate leading: the ttl plus how late the store
    /// freed the lock.
    pub(crate) from_lease_start: Vec<Duration>,
    pub(crate) error: Option<String>,
}

/// The observe row.
#[derive(Debug, Default)]
pub(crate) struct Observe {
    /// Per change: until the last observer had it.
    pub(crate) all: Vec<Duration>,
    /// Per change and observer: until that observer had it.
    pub(crate) each: Vec<Duration>,
    /// One raw round trip after each change.
    pub(crate) floor: Vec<Duration>,
    /// The raw recipe of the same step, if the store's floor has one.
    pub(crate) raw_notify: Option<RawNotify>,
    pub(crate) error: Option<String>,
}

/// The raw notify recipe's samples, one change after each of ours.
#[derive(Debug, Default)]
pub(crate) struct RawNotify {
    /// What the recipe does.
    pub(crate) what: String,
    /// Per change: until the last raw watcher had re-read the node.
    pub(crate) all: Vec<Duration>,
    /// Per change and watcher: until it had re-read the node.
    pub(crate) each: Vec<Duration>,
    /// Per change: until the last raw watcher's watch fired.
    pub(crate) event_all: Vec<Duration>,
    /// Per change and watcher: until its watch fired.
    pub(crate) event_each: Vec<Duration>,
}

/// Everything the election benchmark measured.
#[derive(Debug, Default)]
pub(crate) struct ElectionResults {
    /// What the observe floor's raw round trip is; `None` without a floor.
    pub(crate) round_trip: Option<String>,
    /// What the failover's raw hand-off is; `None` where there is none.
    pub(crate) handoff: Option<String>,
    pub(crate) failover: Failover,
    pub(crate) crash: Crash,
    pub(crate) observe: Observe,
}

impl ElectionResults {
    /// The failures, one line each, naming their row.
    pub(crate) fn errors(&self) -> Vec<String> {
        [
            ("failover after resign", &self.failover.error),
            ("failover after a crash", &self.crash.error),
            ("observe", &self.observe.error),
        ]
        .into_iter()
        .filter_map(|(row, error)| error.as_ref().map(|e| format!("{row}: {e}")))
        .collect()
    }
}

/// Runs the three rows: the resign failover and the observe test within
/// `budget` each (at least [`MIN_SAMPLES`] samples), the crash failover
/// with its own few samples. A row that fails keeps the samples it took
/// before, beside its error.
pub(crate) async fn run(
    opener: &Opener,
    probe: Option<&dyn FloorProbe>,
    budget: Duration,
) -> ElectionResults {
    let mut results = ElectionResults {
        round_trip: probe.map(|probe| probe.describe_round_trip()),
        handoff: probe.and_then(|probe| probe.describe_handoff()),
        ..ElectionResults::default()
    };
    let row = &mut results.failover;
    row.error = failover::after_resign(opener, probe, budget, row)
        .await
        .err();
    results.crash = crash::after_crash(opener).await;
    let row = &mut results.observe;
    row.error = observe::observe(opener, probe, budget, PATIENCE, row)
        .await
        .err();
    results
}

/// Whether a sampling loop that started `elapsed` ago with `taken`
/// samples goes on.
fn more_samples(taken: usize, elapsed: Duration, budget: Duration) -> bool {
    taken < MAX_SAMPLES && (taken < MIN_SAMPLES || elapsed < budget)
}

/// `step` within `limit`, else an error saying that `what` did not happen.
async fn within<T>(
    limit: Duration,
    what: impl FnOnce() -> String,
    step: impl Future<Output = Result<T, String>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, step).await {
        Ok(outcome) => outcome,
        Err(_) => Err(format!(
            "{} within {}",
            what(),
            humantime::format_duration(limit)
        )),
    }
}

/// A spawned task, aborted if dropped before it finished: a row that fails
/// leaves no candidate campaigning and no observer watching behind it.
struct Task<T>(JoinHandle<T>);

impl<T: Send + 'static> Task<T> {
    fn spawn(future: impl std::future::Future<Output = T> + Send + 'static) -> Self {
        Self(tokio::spawn(future))
    }

    async fn join(&mut self) -> Result<T, String> {
        (&mut self.0)
            .await
            .map_err(|error| format!("a bench task failed: {error}"))
    }
}

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A locker of the run (its own connection unless `--shared`).
async fn open(opener: &Opener) -> Result<distlock::Locker, String> {
    opener.open().await.map_err(|failure| failure.message)
}

/// A lock error as one line for a report.
fn describe(error: &distlock::LockError) -> String {
    crate::exit::describe(error)
}

/// Times one raw floor call and adds it to `samples`.
async fn floor_sample<Fut>(samples: &mut Vec<Duration>, call: Fut) -> Result<(), String>
where
    Fut: Future<Output = Result<(), distlock::LockError>>,
{
    let started = Instant::now();
    call.await
        .map_err(|error| format!("floor probe: {}", describe(&error)))?;
    samples.push(started.elapsed());
    Ok(())
}
