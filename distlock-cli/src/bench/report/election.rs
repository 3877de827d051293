//! The election rows of the bench report: failover after resign and after
//! a crash, and observe latency, each beside its floor.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::{before_return_row, latency_row, ratio, short, times, Latency};
use crate::bench::election::{
    Crash, CrashKind, ElectionResults, Failover, Observe, RawNotify, CRASH_TTL, OBSERVERS,
};
use crate::bench::stats::Summary;

/// The `election` object of `--json`.
#[derive(Debug, Serialize)]
pub(crate) struct ElectionJson {
    failover: FailoverJson,
    crash_failover: CrashJson,
    observe: ObserveJson,
}

/// To the waiting candidate's `campaign()` returning.
#[derive(Debug, Serialize)]
struct FailoverJson {
    /// From the leader's `resign()` returning, over the hand-overs that
    /// came after that return.
    ours: Option<Latency>,
    /// Hand-overs complete before the leader's `resign()` returned.
    before_resign_returned: usize,
    /// From the leader's `resign()` being called: the whole hand-over.
    from_resign_call: Option<Latency>,
    /// The raw lock+release (two round trips), measured between samples;
    /// its ratio is `from_resign_call`'s: the whole hand-over against two
    /// raw round trips.
    #[serde(flatten)]
    floor: FloorJson,
    /// A raw hand-off (the file store: a thread blocked in `flock`), with
    /// `from_resign_call`'s ratio to it; `null` where the store has none.
    handoff_floor: Option<FloorJson>,
    /// Why the row stopped short; `null` if it did not.
    error: Option<String>,
}

/// From a crashed leader to the waiting candidate leading.
#[derive(Debug, Serialize)]
struct CrashJson {
    /// How the leader crashed: `"leaked guard"` (in process, on stores
    /// with per-lock leases) or `"killed process"` (a `distlock elect`
    /// child killed with SIGKILL, on stores whose locks last as long as a
    /// session or process).
    crash: &'static str,
    /// The crashed leader's lease (or session) ttl: the floor of this row
    /// where the store frees the lock by expiry.
    ttl_ms: u64,
    /// Measured from the crash.
    ours: Option<Latency>,
    /// For leaked guards, how long after its lease ended (its lock call +
    /// ttl) the candidate led; negative would mean two leaders at once.
    /// `null` for killed processes, whose last renewal is not known here.
    beyond_ttl_p50_us: Option<f64>,
    beyond_ttl_p99_us: Option<f64>,
    error: Option<String>,
}

/// From `campaign()` or `proclaim()` returning until the observers have
/// the new leader or value.
#[derive(Debug, Serialize)]
struct ObserveJson {
    observers: usize,
    /// Per change: until the last observer had it.
    all_observers: Option<Latency>,
    /// Per change and observer.
    per_observer: Option<Latency>,
    /// One raw round trip, measured after each change; its ratio is
    /// `all_observers`'.
    #[serde(flatten)]
    floor: FloorJson,
    /// The raw recipe of the same step, one change after each of ours;
    /// `null` on a store without one.
    raw_notify_floor: Option<RawNotifyJson>,
    error: Option<String>,
}

/// Raw watchers of one key, each re-reading once its watch fires, after a
/// raw change.
#[derive(Debug, Serialize)]
struct RawNotifyJson {
    probe: String,
    /// Per change: until the last raw watcher had re-read the key.
    all_observers: Option<Latency>,
    /// Per change and raw watcher.
    per_observer: Option<Latency>,
    /// Per change: until the last raw watcher's watch fired.
    event_all_observers: Option<Latency>,
    event_per_observer: Option<Latency>,
    /// Our `all_observers` p50 over the raw `all_observers` p50.
    p50_ratio: Option<f64>,
}

/// A row's floor, beside the row's own latency.
#[derive(Debug, Serialize)]
struct FloorJson {
    floor: Option<Latency>,
    /// What the floor does; `null` without a floor.
    floor_probe: Option<String>,
    /// The row's p50 over the floor's.
    p50_ratio: Option<f64>,
}

impl ElectionJson {
    /// The rows of `results`; `probe` describes the lock+release floor.
    pub(crate) fn new(results: &ElectionResults, probe: Option<&str>) -> Self {
        Self {
            failover: FailoverJson::new(&results.failover, probe, results.handoff.as_deref()),
            crash_failover: CrashJson::new(&results.crash),
            observe: ObserveJson::new(&results.observe, results.round_trip.as_deref()),
        }
    }

    /// The election section of the table.
    pub(crate) fn table(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\n{:<26}{:>7}{:>11}{:>11}{:>11}",
            "election", "n", "p50", "p99", "mean"
        );
        let failover = &self.failover;
        latency_row(out, "failover (resign)", failover.ours.as_ref());
        latency_row(
            out,
            "  from resign call",
            failover.from_resign_call.as_ref(),
        );
        before_return_row(
            out,
            "resign",
            failover.before_resign_returned,
            failover.from_resign_call.as_ref(),
        );
        failover
            .floor
            .rows(out, ("floor (lock+release)", "resign call/floor"));
        if let Some(handoff) = &failover.handoff_floor {
            handoff.rows(out, ("floor (raw hand-off)", "resign call/hand-off"));
        }
        problem_row(out, "failed", failover.error.as_deref());

        let crash = &self.crash_failover;
        latency_row(out, "failover (crash)", crash.ours.as_ref());
        let ttl = humantime::format_duration(Duration::from_millis(crash.ttl_ms));
        if crash.beyond_ttl_p50_us.is_some() {
            let _ = writeln!(
                out,
                "{:<33}{:>11}{:>11}",
                format!("    past the ttl ({ttl})"),
                signed_short(crash.beyond_ttl_p50_us),
                signed_short(crash.beyond_ttl_p99_us),
            );
        } else {
            let _ = writeln!(out, "    {}, from its SIGKILL; ttl {ttl}", crash.crash);
        }
        problem_row(out, "failed", crash.error.as_deref());

        let observe = &self.observe;
        let all = format!("observe (all {})", observe.observers);
        latency_row(out, &all, observe.all_observers.as_ref());
        latency_row(out, "observe (each)", observe.per_observer.as_ref());
        observe
            .floor
            .rows(out, ("floor (1 round trip)", "all/floor"));
        if let Some(raw) = &observe.raw_notify_floor {
            raw.rows(out, observe.observers);
        }
        problem_row(out, "failed", observe.error.as_deref());
    }
}

impl FailoverJson {
    fn new(row: &Failover, probe: Option<&str>, handoff: Option<&str>) -> Self {
        let from_call = Latency::of(&row.handovers.from_call);
        Self {
            floor: FloorJson::new(probe, &row.floor, from_call.as_ref()),
            handoff_floor: handoff
                .filter(|_| !row.handoff_floor.is_empty())
                .map(|what| FloorJson::new(Some(what), &row.handoff_floor, from_call.as_ref())),
            ours: Latency::of(&row.handovers.after_return),
            before_resign_returned: row.handovers.before_return,
            from_resign_call: from_call,
            error: row.error.clone(),
        }
    }
}

impl CrashJson {
    fn new(crash: &Crash) -> Self {
        let since_lease = Summary::of(&crash.from_lease_start);
        Self {
            crash: match crash.kind {
                CrashKind::LeakedGuard => "leaked guard",
                CrashKind::KilledProcess => "killed process",
            },
            ttl_ms: u64::try_from(CRASH_TTL.as_millis()).unwrap_or(u64::MAX),
            ours: Latency::of(&crash.from_crash),
            beyond_ttl_p50_us: since_lease.map(|s| beyond(s.p50, CRASH_TTL)),
            beyond_ttl_p99_us: since_lease.map(|s| beyond(s.p99, CRASH_TTL)),
            error: crash.error.clone(),
        }
    }
}

impl ObserveJson {
    fn new(observe: &Observe, round_trip: Option<&str>) -> Self {
        let all = Latency::of(&observe.all);
        Self {
            observers: OBSERVERS,
            floor: FloorJson::new(round_trip, &observe.floor, all.as_ref()),
            raw_notify_floor: observe
                .raw_notify
                .as_ref()
                .map(|raw| RawNotifyJson::new(raw, all.as_ref())),
            all_observers: all,
            per_observer: Latency::of(&observe.each),
            error: observe.error.clone(),
        }
    }
}

impl RawNotifyJson {
    fn new(raw: &RawNotify, ours: Option<&Latency>) -> Self {
        let all = Latency::of(&raw.all);
        Self {
            probe: raw.what.clone(),
            p50_ratio: ratio(ours.map(|l| l.p50_us), all.as_ref().map(|l| l.p50_us)),
            all_observers: all,
            per_observer: Latency::of(&raw.each),
            event_all_observers: Latency::of(&raw.event_all),
            event_per_observer: Latency::of(&raw.event_each),
        }
    }

    fn rows(&self, out: &mut String, observers: usize) {
        let all = format!("raw watch+reread ({observers})");
        latency_row(out, &all, self.all_observers.as_ref());
        latency_row(out, "raw watch+reread (each)", self.per_observer.as_ref());
        let event = format!("raw watch event ({observers})");
        latency_row(out, &event, self.event_all_observers.as_ref());
        let _ = writeln!(out, "{:<26}{:>7}  {}", "    what", "", self.probe);
        let _ = writeln!(
            out,
            "{:<26}{:>7}{:>11}",
            "    all/raw",
            "",
            times(self.p50_ratio)
        );
    }
}

/// `latency - ttl` in microseconds, negative if shorter.
fn beyond(latency: Duration, ttl: Duration) -> f64 {
    let nanos = |d: Duration| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX);
    (nanos(latency) - nanos(ttl)) as f64 / 1e3
}

impl FloorJson {
    /// The floor of a row whose own latency is `ours`: `samples` taken
    /// with the probe `probe` describes; nothing without a probe.
    fn new(probe: Option<&str>, samples: &[Duration], ours: Option<&Latency>) -> Self {
        let floor = probe.and_then(|_| Latency::of(samples));
        Self {
            p50_ratio: ratio(ours.map(|l| l.p50_us), floor.as_ref().map(|l| l.p50_us)),
            floor,
            floor_probe: probe.map(str::to_owned),
        }
    }

    /// The floor's row, what it does, and the ratio to it (`labels`: of
    /// the floor's row and of the ratio's); one `n/a` row without a floor.
    fn rows(&self, out: &mut String, (label, ratio_label): (&str, &str)) {
        let Some(probe) = &self.floor_probe else {
            let _ = writeln!(out, "  {label:<24}{:>7}  (no raw floor)", "n/a");
            return;
        };
        latency_row(out, label, self.floor.as_ref());
        let _ = writeln!(out, "{:<26}{:>7}  {probe}", "    what", "");
        let _ = writeln!(
            out,
            "{:<26}{:>7}{:>11}",
            format!("    {ratio_label}"),
            "",
            times(self.p50_ratio)
        );
    }
}

fn problem_row(out: &mut String, what: &str, message: Option<&str>) {
    if let Some(message) = message {
        let _ = writeln!(out, "    {what}: {message}");
    }
}

/// [`short`] for a latency that may be negative; `n/a` for none.
fn signed_short(us: Option<f64>) -> String {
    match us {
        None => "n/a".to_owned(),
        Some(us) if us < 0.0 => format!("-{}", short(-us)),
        Some(us) => short(us),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::stats::Handovers;

    fn ms(values: impl IntoIterator<Item = u64>) -> Vec<Duration> {
        values.into_iter().map(Duration::from_millis).collect()
    }

    fn results() -> ElectionResults {
        ElectionResults {
            round_trip: Some("GET".to_owned()),
            handoff: Some("raw hand-off".to_owned()),
            failover: Failover {
                handovers: Handovers {
                    after_return: ms([2, 2, 2]),
                    from_call: ms([3, 3, 3]),
                    before_return: 1,
                },
                floor: ms([1, 1, 1]),
                handoff_floor: ms([2, 2, 2]),
                error: None,
            },
            crash: Crash {
                kind: CrashKind::LeakedGuard,
                from_crash: ms([990, 995]),
                from_lease_start: ms([1003, 1004]),
                error: None,
            },
            observe: Observe {
                all: ms([4, 4]),
                each: ms([1, 2, 3, 4]),
                floor: ms([1, 1]),
                raw_notify: Some(RawNotify {
                    what: "16 sessions".to_owned(),
                    all: ms([2, 2]),
                    each: ms([1, 2, 1, 2]),
                    event_all: ms([1, 1]),
                    event_each: ms([1, 1, 1, 1]),
                }),
                error: Some("3 of 16 observers did not see it".to_owned()),
            },
        }
    }

    #[test]
    fn json_names_every_row_and_its_floor() {
        let json =
            serde_json::to_value(ElectionJson::new(&results(), Some("SET NX PX + DEL"))).unwrap();
        assert_eq!(json["failover"]["ours"]["p50_us"], 2000.0);
        assert_eq!(json["failover"]["floor_probe"], "SET NX PX + DEL");
        assert_eq!(json["failover"]["from_resign_call"]["p50_us"], 3000.0);
        assert_eq!(json["failover"]["p50_ratio"], 3.0);
        assert_eq!(
            json["failover"]["handoff_floor"]["floor_probe"],
            "raw hand-off"
        );
        assert_eq!(json["failover"]["handoff_floor"]["p50_ratio"], 1.5);
        assert!(json["failover"]["error"].is_null());
        assert_eq!(json["crash_failover"]["ttl_ms"], 1000);
        assert_eq!(json["crash_failover"]["beyond_ttl_p50_us"], 3000.0);
        assert_eq!(json["crash_failover"]["crash"], "leaked guard");
        assert_eq!(json["observe"]["observers"], 16);
        assert_eq!(json["observe"]["per_observer"]["n"], 4);
        assert_eq!(json["observe"]["p50_ratio"], 4.0);
        assert_eq!(json["observe"]["floor_probe"], "GET");
        assert_eq!(json["observe"]["error"], "3 of 16 observers did not see it");
        let raw = &json["observe"]["raw_notify_floor"];
        assert_eq!(raw["probe"], "16 sessions");
        assert_eq!(raw["all_observers"]["p50_us"], 2000.0);
        assert_eq!(raw["per_observer"]["n"], 4);
        assert_eq!(raw["event_all_observers"]["p50_us"], 1000.0);
        assert_eq!(raw["p50_ratio"], 2.0);
    }

    #[test]
    fn table_shows_rows_floors_skips_and_failures() {
        let mut table = String::new();
        ElectionJson::new(&results(), Some("SET NX PX + DEL")).table(&mut table);
        for part in [
            "failover (resign)",
            "floor (lock+release)",
            "SET NX PX + DEL",
            "from resign call",
            "resign call/floor",
            "3.00x",
            "floor (raw hand-off)",
            "resign call/hand-off",
            "1.50x",
            "all/floor",
            "failover (crash)",
            "past the ttl (1s)",
            "3.00ms",
            "observe (all 16)",
            "observe (each)",
            "floor (1 round trip)",
            "4.00x",
            "raw watch+reread (16)",
            "raw watch+reread (each)",
            "raw watch event (16)",
            "all/raw",
            "failed: 3 of 16 observers did not see it",
        ] {
            assert!(table.contains(part), "{part} missing in\n{table}");
        }

        let mut killed = results();
        killed.crash = Crash {
            kind: CrashKind::KilledProcess,
            from_crash: ms([1, 2]),
            ..Crash::default()
        };
        killed.round_trip = None;
        killed.observe.raw_notify = None;
        let mut table = String::new();
        ElectionJson::new(&killed, None).table(&mut table);
        assert!(
            table.contains("failover (crash)")
                && table.contains("killed process, from its SIGKILL; ttl 1s")
                && !table.contains("past the ttl"),
            "{table}"
        );
        assert!(table.contains("(no raw floor)"), "{table}");
        assert!(!table.contains("raw watch"), "{table}");
        let json = serde_json::to_value(ElectionJson::new(&killed, None)).unwrap();
        assert_eq!(json["crash_failover"]["crash"], "killed process");
        assert!(json["crash_failover"]["beyond_ttl_p50_us"].is_null());
        assert!(json["observe"]["raw_notify_floor"].is_null());
        assert_eq!(signed_short(Some(-1500.0)), "-1.50ms");
    }
}
