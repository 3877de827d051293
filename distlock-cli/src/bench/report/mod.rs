//! The bench report: an aligned table for people, JSON for scripts.
//!
//! Ratios are always ours/floor: above 1 for latencies means distlock is
//! slower than the raw round trips, below 1 for throughput means it does
//! fewer operations per second.

mod election;
mod hold;

use std::fmt::Write as _;
use std::time::Duration;

use distlock::Locker;
use serde::Serialize;

use super::election::ElectionResults;
use super::measure::{Counts, Uncontended};
use super::stats::{jain_index, Handovers, Summary};
use crate::url::ChosenStore;

use election::ElectionJson;
pub(crate) use hold::HoldReport;

/// Where a bench ran: the first lines of either report.
#[derive(Debug, Serialize)]
pub(crate) struct Target {
    pub(crate) backend: &'static str,
    /// Password redacted.
    pub(crate) url: String,
    /// The run's fresh namespace.
    pub(crate) namespace: String,
}

impl Target {
    /// A run through `locker`, on `store`, in `namespace`.
    pub(crate) fn new(locker: &Locker, store: &ChosenStore, namespace: &str) -> Self {
        Self {
            backend: locker.backend_name(),
            url: store.shown().to_owned(),
            namespace: namespace.to_owned(),
        }
    }

    /// The table rows naming the target.
    fn rows(&self) -> [(&'static str, String); 3] {
        [
            ("backend", self.backend.to_owned()),
            ("url", self.url.clone()),
            ("namespace", self.namespace.clone()),
        ]
    }
}

/// What was measured, where and how; serialised as the `--json` output.
#[derive(Debug, Serialize)]
pub(crate) struct BenchReport {
    #[serde(flatten)]
    pub(crate) target: Target,
    pub(crate) clients: usize,
    pub(crate) keys: usize,
    pub(crate) shared: bool,
    /// The runtime the clients ran on: `current thread` or `N worker threads`.
    pub(crate) runtime: String,
    #[serde(rename = "duration_ms", serialize_with = "millis")]
    pub(crate) duration: Duration,
    /// What the floor probe does; `None` if the backend has no floor.
    pub(crate) probe: Option<String>,
    /// What the raw recipe measured beside the floor does; `None` if the
    /// store has none.
    pub(crate) beside: Option<String>,
}

/// The report with its results.
#[derive(Debug, Serialize)]
pub(crate) struct BenchResults {
    #[serde(flatten)]
    setup: BenchReport,
    uncontended: Option<Latency>,
    /// From the holder's `release()` returning to the waiter's `lock()`
    /// returning, over the hand-offs that came after that return.
    handoff: Option<Latency>,
    /// From the holder's `release()` call, over every hand-off.
    handoff_from_release_call: Option<Latency>,
    /// Hand-offs complete before the holder's `release()` returned.
    handoff_before_release_returned: usize,
    /// Failover and observe latency of leader election.
    election: ElectionJson,
    throughput: Throughput,
    /// `null` when the backend has no floor probe.
    floor: Option<Floor>,
}

/// A latency distribution in microseconds.
#[derive(Debug, Serialize)]
struct Latency {
    n: usize,
    p50_us: f64,
    p99_us: f64,
    mean_us: f64,
}

/// Operations per second of a set of clients.
#[derive(Debug, Serialize)]
struct Throughput {
    ops: u64,
    elapsed_ms: f64,
    ops_per_sec: f64,
    /// Jain's index over `per_client`; `null` if nothing was done.
    fairness: Option<f64>,
    per_client: Vec<u64>,
}

/// The raw floor and our ratios to it.
#[derive(Debug, Serialize)]
struct Floor {
    probe: String,
    uncontended: Option<Latency>,
    /// Our uncontended p50 / the floor's.
    p50_ratio: Option<f64>,
    throughput: Option<Throughput>,
    /// Our throughput / the floor's.
    throughput_ratio: Option<f64>,
    /// Raw attempts that found their lock held by another client during
    /// the throughput test (and were tried again).
    throughput_busy: u64,
    /// Probe calls that failed during the throughput test, and the first
    /// such failure.
    throughput_errors: u64,
    throughput_first_error: Option<String>,
    /// The raw recipe beside the floor, if the store has one.
    beside: Option<Beside>,
}

/// Another raw recipe of a lock, measured beside the floor, and our ratio
/// to it.
#[derive(Debug, Serialize)]
struct Beside {
    probe: String,
    uncontended: Option<Latency>,
    /// Our uncontended p50 / its.
    p50_ratio: Option<f64>,
}

impl BenchReport {
    /// Attaches the measurements.
    pub(crate) fn with_results(
        self,
        uncontended: &Uncontended,
        handoff: &Handovers,
        election: &ElectionResults,
        ours: &Counts,
        floor_counts: Option<&Counts>,
    ) -> BenchResults {
        let election = ElectionJson::new(election, self.probe.as_deref());
        let ours_latency = Latency::of(&uncontended.ours);
        let throughput = Throughput::of(ours);
        let ours_p50 = ours_latency.as_ref().map(|l| l.p50_us);
        let beside = self.beside.clone().map(|probe| {
            let latency = Latency::of(&uncontended.beside);
            Beside {
                probe,
                p50_ratio: ratio(ours_p50, latency.as_ref().map(|l| l.p50_us)),
                uncontended: latency,
            }
        });
        let floor = self.probe.clone().map(|probe| {
            let latency = Latency::of(&uncontended.floor);
            let floor_throughput = floor_counts.map(Throughput::of);
            Floor {
                beside,
                probe,
                p50_ratio: ratio(
                    ours_latency.as_ref().map(|l| l.p50_us),
                    latency.as_ref().map(|l| l.p50_us),
                ),
                uncontended: latency,
                throughput_ratio: ratio(
                    Some(throughput.ops_per_sec),
                    floor_throughput.as_ref().map(|t| t.ops_per_sec),
                ),
                throughput: floor_throughput,
                throughput_busy: floor_counts.map_or(0, |c| c.busy),
                throughput_errors: floor_counts.map_or(0, |c| c.errors),
                throughput_first_error: floor_counts.and_then(|c| c.first_error.clone()),
            }
        });
        BenchResults {
            setup: self,
            uncontended: ours_latency,
            handoff: Latency::of(&handoff.after_return),
            handoff_from_release_call: Latency::of(&handoff.from_call),
            handoff_before_release_returned: handoff.before_return,
            election,
            throughput,
            floor,
        }
    }
}

impl Latency {
    fn of(samples: &[Duration]) -> Option<Self> {
        Summary::of(samples).map(|s| Self {
            n: s.n,
            p50_us: micros(s.p50),
            p99_us: micros(s.p99),
            mean_us: micros(s.mean),
        })
    }
}

impl Throughput {
    fn of(counts: &Counts) -> Self {
        let ops = counts.per_client.iter().sum();
        let seconds = counts.elapsed.as_secs_f64();
        Self {
            ops,
            elapsed_ms: seconds * 1e3,
            ops_per_sec: if seconds > 0.0 {
                ops as f64 / seconds
            } else {
                0.0
            },
            fairness: jain_index(&counts.per_client),
            per_client: counts.per_client.clone(),
        }
    }
}

impl BenchReport {
    /// The table's first lines: what was measured, where and how.
    fn setup_rows(&self, out: &mut String) {
        let setup = self;
        let connections = if setup.shared {
            "sharing one connection"
        } else {
            "one connection each"
        };
        let floor = match &setup.probe {
            Some(probe) => probe.clone(),
            None => format!(
                "n/a (the {} backend has no raw floor)",
                setup.target.backend
            ),
        };
        for (name, value) in setup
            .target
            .rows()
            .into_iter()
            .chain([
                ("clients", format!("{} ({connections})", setup.clients)),
                ("keys", setup.keys.to_string()),
                ("runtime", setup.runtime.clone()),
                (
                    "duration",
                    humantime::format_duration(setup.duration).to_string(),
                ),
                ("floor", floor),
            ])
            .chain(setup.beside.clone().map(|beside| ("beside", beside)))
        {
            let _ = writeln!(out, "{name:<11}{value}");
        }
    }
}

impl BenchResults {
    /// The aligned, human-readable table.
    pub(crate) fn table(&self) -> String {
        let mut out = String::new();
        self.setup.setup_rows(&mut out);
        let _ = writeln!(
            out,
            "\n{:<26}{:>7}{:>11}{:>11}{:>11}",
            "latency", "n", "p50", "p99", "mean"
        );
        latency_row(&mut out, "lock+release", self.uncontended.as_ref());
        if let Some(floor) = &self.floor {
            latency_row(&mut out, "floor", floor.uncontended.as_ref());
            let _ = writeln!(
                out,
                "{:<26}{:>7}{:>11}",
                "  ours/floor",
                "",
                times(floor.p50_ratio)
            );
            if let Some(beside) = &floor.beside {
                latency_row(&mut out, "beside the floor", beside.uncontended.as_ref());
                let _ = writeln!(
                    out,
                    "{:<26}{:>7}{:>11}",
                    "  ours/beside",
                    "",
                    times(beside.p50_ratio)
                );
            }
        }
        latency_row(&mut out, "handoff", self.handoff.as_ref());
        latency_row(
            &mut out,
            "  from release call",
            self.handoff_from_release_call.as_ref(),
        );
        before_return_row(
            &mut out,
            "release",
            self.handoff_before_release_returned,
            self.handoff_from_release_call.as_ref(),
        );
        self.election.table(&mut out);

        let _ = writeln!(
            out,
            "\n{:<26}{:>11}{:>11}{:>10}",
            "throughput", "ops/s", "ops", "fairness"
        );
        throughput_row(&mut out, "lock+release", Some(&self.throughput));
        if let Some(floor) = &self.floor {
            throughput_row(&mut out, "floor", floor.throughput.as_ref());
            floor.attempt_rows(&mut out);
            let _ = writeln!(
                out,
                "{:<26}{:>11}",
                "  ours/floor",
                times(floor.throughput_ratio)
            );
        }
        out.push_str(LEGEND);
        if self.setup.beside.is_some() {
            out.push_str(BESIDE_LEGEND);
        }
        out.truncate(out.trim_end().len());
        out
    }
}

/// What the table's columns and rows mean, printed once below it.
const LEGEND: &str = "
n: samples; p50, p99: the median and the 99th percentile, mean: the average.
floor: the same store operations made raw, without distlock, in the same run;
  ours/floor: distlock's figure over the floor's (latency: above 1 is slower;
  throughput: below 1 is fewer operations per second).
handoff: from the holder's release() returning to the waiting client's lock()
  returning (a store may hand over before release() returns: counted apart);
  from release call: from the release() call instead, every hand-off.
fairness: Jain's index over the clients' shares of the operations (1: equal).
";

/// The legend's line for a recipe beside the floor, when there is one.
const BESIDE_LEGEND: &str = "\
beside the floor: another raw lock the store offers (`beside` above), measured
  for comparison only: it lacks what the store's locks guarantee.
";

impl Floor {
    /// The throughput floor's attempts that did not count as operations.
    fn attempt_rows(&self, out: &mut String) {
        if self.throughput_busy > 0 {
            let _ = writeln!(
                out,
                "    {} raw attempts found the key held by another client and tried again",
                self.throughput_busy
            );
        }
        if self.throughput_errors > 0 {
            let _ = writeln!(
                out,
                "    {} raw attempts failed; the first: {}",
                self.throughput_errors,
                self.throughput_first_error.as_deref().unwrap_or("unknown")
            );
        }
    }
}

/// `    3 of 144 were done before release() returned`, when any were.
fn before_return_row(out: &mut String, call: &str, count: usize, all: Option<&Latency>) {
    if count > 0 {
        let total = all.map_or(0, |l| l.n);
        let _ = writeln!(
            out,
            "    {count} of {total} were done before {call}() returned"
        );
    }
}

fn latency_row(out: &mut String, label: &str, latency: Option<&Latency>) {
    let label = format!("  {label}");
    let _ = match latency {
        Some(l) => writeln!(
            out,
            "{label:<26}{:>7}{:>11}{:>11}{:>11}",
            l.n,
            short(l.p50_us),
            short(l.p99_us),
            short(l.mean_us)
        ),
        None => writeln!(out, "{label:<26}{:>7}", "n/a"),
    };
}

fn throughput_row(out: &mut String, label: &str, throughput: Option<&Throughput>) {
    let label = format!("  {label}");
    let _ = match throughput {
        Some(t) => {
            let fairness = t.fairness.map_or("n/a".to_owned(), |f| format!("{f:.3}"));
            writeln!(
                out,
                "{label:<26}{:>11.0}{:>11}{fairness:>10}",
                t.ops_per_sec, t.ops
            )
        }
        None => writeln!(out, "{label:<26}{:>11}", "n/a"),
    };
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// A latency in microseconds, in the unit that keeps it short.
fn short(us: f64) -> String {
    if us < 1e3 {
        format!("{us:.1}µs")
    } else if us < 1e6 {
        format!("{:.2}ms", us / 1e3)
    } else {
        format!("{:.2}s", us / 1e6)
    }
}

fn ratio(ours: Option<f64>, floor: Option<f64>) -> Option<f64> {
    match (ours, floor) {
        (Some(ours), Some(floor)) if floor > 0.0 => Some(ours / floor),
        _ => None,
    }
}

fn times(ratio: Option<f64>) -> String {
    ratio.map_or("n/a".to_owned(), |r| format!("{r:.2}x"))
}

fn millis<S: serde::Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
