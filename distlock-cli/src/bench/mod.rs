//! `distlock bench`: latency, handoff, leader election (see [`election`])
//! and throughput of a store through distlock, against the store's raw
//! floor (see [`floor`]); with `--hold N`,
//! instead, what holding N locks costs the client process (see [`hold`]).
//!
//! Everything runs in one process and one run, so the ratios to the floor
//! hold on a noisy machine: the uncontended test alternates blocks of ours
//! and the floor's operations, so noise hits both alike. Locks live in a
//! fresh namespace `bench-<random>`, so runs never collide with each other
//! or with real locks.

mod election;
mod floor;
mod hold;
mod measure;
mod opener;
mod report;
mod stats;

use std::time::{Duration, Instant};

use distlock::Locker;

use floor::FloorProbe;
use opener::Opener;
use stats::Handovers;

use crate::cli::BenchArgs;
use crate::exit::{Failure, SUCCESS};
use crate::output;
use crate::url::ChosenStore;
use report::{BenchReport, HoldReport, Target};

/// Runs the benchmark and prints its table (or JSON).
pub(crate) async fn bench(store: &ChosenStore, args: BenchArgs) -> Result<i32, Failure> {
    if let Some(locks) = args.hold {
        return bench_hold(store, locks, args.hold_for, args.json).await;
    }
    let clients = usize::try_from(args.clients).unwrap_or(usize::MAX);
    let keys = usize::try_from(args.keys).unwrap_or(usize::MAX);
    let opener = Opener::new(store, args.shared).await?;
    let base = opener.open().await?;
    let probe = floor::open(store.as_str())
        .await
        .map_err(|error| store.failure(error))?;

    let (uncontended, handoff, election, ours, floor) =
        measure_all(&opener, &base, probe.as_deref(), &args).await?;
    let report = BenchReport {
        target: Target::new(&base, store, &opener.namespace),
        clients,
        keys,
        shared: args.shared,
        runtime: runtime_description(),
        duration: args.duration,
        probe: probe.as_ref().map(|p| p.describe()),
        beside: probe.as_ref().and_then(|p| p.describe_beside()),
    }
    .with_results(&uncontended, &handoff, &election, &ours, floor.as_ref());
    let text = if args.json {
        to_json(&report)?
    } else {
        report.table()
    };
    output::line(&text)?;
    clean_up(&base, probe.as_deref(), &opener.namespace).await;
    // Everything measured is printed; a row that could not be measured
    // (a store whose watch delivers nothing, say) still fails the run.
    match election.errors().as_slice() {
        [] => Ok(SUCCESS),
        errors => Err(Failure::other(format!(
            "election benchmark failed: {}",
            errors.join("; ")
        ))),
    }
}

/// The least the throughput test gets when the other tests used up
/// `--duration` (they take a minimum number of samples each).
const MIN_THROUGHPUT: Duration = Duration::from_millis(400);

/// Every measurement of a run, within `--duration` in all: a sixth each
/// for the uncontended latency and the handoff, a sixth for the election
/// rows (its crash failover also waits out a 1 s ttl), and what is left
/// for throughput, shared by ours and the floor's in alternating slices.
async fn measure_all(
    opener: &Opener,
    base: &Locker,
    probe: Option<&dyn FloorProbe>,
    args: &BenchArgs,
) -> Result<Measured, Failure> {
    let started = Instant::now();
    let part = args.duration / 6;
    let uncontended = measure::uncontended(base, probe, part).await?;
    let handoff = measure::handoff(opener, part).await?;
    let election = election::run(opener, probe, part / 2).await;
    let left = args.duration.saturating_sub(started.elapsed());
    let each = if probe.is_some() { left / 2 } else { left };
    let clients = usize::try_from(args.clients).unwrap_or(usize::MAX);
    let keys = usize::try_from(args.keys).unwrap_or(usize::MAX);
    let (ours, floor) = measure::throughputs(
        opener,
        clients,
        keys,
        each.max(MIN_THROUGHPUT),
        probe.is_some(),
    )
    .await?;
    Ok((uncontended, handoff, election, ours, floor))
}

/// What [`measure_all`] measured.
type Measured = (
    measure::Uncontended,
    Handovers,
    election::ElectionResults,
    measure::Counts,
    Option<measure::Counts>,
);

/// Removes what the run left in the store: its namespace's locks,
/// counters and containers, and the floor's raw locks. A failure is
/// warned about, never fatal: the measurements are printed already.
async fn clean_up(base: &Locker, probe: Option<&dyn FloorProbe>, namespace: &str) {
    let purged = base.purge_namespace().await;
    let floor = match probe {
        Some(probe) => probe.clean_up(namespace).await,
        None => Ok(()),
    };
    if let Err(error) = purged.and(floor) {
        output::say(&format!(
            "warning: could not remove what the run left in the store: {}",
            crate::exit::describe(&error)
        ));
    }
}

/// `bench --hold`: only the cost of holding `locks` locks for `window`,
/// alone in the process so that the write counters see nothing else.
async fn bench_hold(
    store: &ChosenStore,
    locks: u32,
    window: std::time::Duration,
    json: bool,
) -> Result<i32, Failure> {
    let opener = Opener::new(store, false).await?;
    let locker = opener.open().await?;
    let locks = usize::try_from(locks).unwrap_or(usize::MAX);
    let cost = hold::hold(&locker, locks, window).await?;
    clean_up(&locker, None, &opener.namespace).await;
    let report = HoldReport {
        target: Target::new(&locker, store, &opener.namespace),
        ttl: locker.options().ttl,
        hold: cost,
    };
    let text = if json {
        to_json(&report)?
    } else {
        report.table()
    };
    output::line(&text)?;
    Ok(SUCCESS)
}

/// The report as JSON, with the lock metrics recorded during the run
/// under `metrics` (the series names of `--metrics-file`).
fn to_json(report: &impl serde::Serialize) -> Result<String, Failure> {
    let mut value = serde_json::to_value(report).map_err(|e| Failure::other(e.to_string()))?;
    if let (Some(series), Some(object)) = (crate::metrics_out::series(), value.as_object_mut()) {
        let series = serde_json::to_value(series).map_err(|e| Failure::other(e.to_string()))?;
        object.insert("metrics".to_owned(), series);
    }
    serde_json::to_string_pretty(&value).map_err(|e| Failure::other(e.to_string()))
}

/// The runtime this bench runs on, for the report.
fn runtime_description() -> String {
    let handle = tokio::runtime::Handle::current();
    match handle.runtime_flavor() {
        tokio::runtime::RuntimeFlavor::CurrentThread => "current thread".to_owned(),
        _ => format!("{} worker threads", handle.metrics().num_workers()),
    }
}
