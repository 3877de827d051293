//! The report of `bench --hold`: what holding many locks costs.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::{micros, short, Target};
use crate::bench::hold::{HoldCost, HoldJson};

/// The report of `bench --hold`; serialised as its `--json` output.
#[derive(Debug, Serialize)]
pub(crate) struct HoldReport {
    #[serde(flatten)]
    pub(crate) target: Target,
    /// The locker's ttl: how often locks are renewed depends on it.
    #[serde(rename = "ttl_ms", serialize_with = "super::millis")]
    pub(crate) ttl: Duration,
    #[serde(serialize_with = "hold_json")]
    pub(crate) hold: HoldCost,
}

impl HoldReport {
    /// The aligned, human-readable table.
    pub(crate) fn table(&self) -> String {
        let hold = &self.hold;
        let mut out = String::new();
        let ttl = ("ttl", humantime::format_duration(self.ttl).to_string());
        for (name, value) in self.target.rows().into_iter().chain([ttl]) {
            let _ = writeln!(out, "{name:<11}{value}");
        }
        let _ = writeln!(
            out,
            "\nholding {} locks on one locker for {:.2}s (taken in {})",
            hold.locks,
            hold.window.as_secs_f64(),
            short(micros(hold.acquire))
        );
        let na = || "n/a".to_owned();
        let rows = [
            (
                "write syscalls/s",
                hold.syscalls_per_sec()
                    .map_or_else(na, |r| format!("{r:.1}")),
                hold.writes
                    .map(|w| format!("{} in the window", w.syscalls))
                    .unwrap_or_default(),
            ),
            (
                "bytes written/s",
                hold.bytes_per_sec().map_or_else(na, |r| format!("{r:.0}")),
                hold.writes
                    .map(|w| format!("{} in the window", w.bytes))
                    .unwrap_or_default(),
            ),
            (
                "RSS per held lock",
                hold.rss_per_lock().map_or_else(na, |b| format!("{b:.0} B")),
                match (hold.rss_before, hold.rss_after) {
                    (Some(before), Some(after)) => {
                        format!("RSS {} before, {} holding", mib(before), mib(after))
                    }
                    _ => String::new(),
                },
            ),
            ("lost while held", hold.lost.to_string(), String::new()),
        ];
        for (label, value, note) in rows {
            let line = format!("  {label:<24}{value:>12}  {note}");
            let _ = writeln!(out, "{}", line.trim_end());
        }
        out.truncate(out.trim_end().len());
        out
    }
}

fn hold_json<S: serde::Serializer>(hold: &HoldCost, serializer: S) -> Result<S::Ok, S::Error> {
    HoldJson::serialize(&hold.json(), serializer)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::hold::IoCounters;

    fn hold_report(writes: Option<IoCounters>) -> HoldReport {
        HoldReport {
            target: Target {
                backend: "redis",
                url: "redis://***@127.0.0.1:6379".into(),
                namespace: "bench-1".into(),
            },
            ttl: Duration::from_secs(3),
            hold: HoldCost {
                locks: 200,
                acquire: Duration::from_millis(20),
                window: Duration::from_secs(2),
                writes,
                rss_before: writes.map(|_| 10 << 20),
                rss_after: writes.map(|_| (10 << 20) + 200 * 2048),
                lost: 0,
            },
        }
    }

    #[test]
    fn hold_table_and_json_name_every_number() {
        let measured = hold_report(Some(IoCounters {
            syscalls: 300,
            bytes: 30_000,
        }));
        let table = measured.table();
        for part in [
            "ttl        3s",
            "holding 200 locks on one locker for 2.00s (taken in 20.00ms)",
            "write syscalls/s",
            "150.0  300 in the window",
            "bytes written/s",
            "15000  30000 in the window",
            "RSS per held lock",
            "2048 B  RSS 10.0 MiB before, 10.4 MiB holding",
            "lost while held",
        ] {
            assert!(table.contains(part), "{part} missing in\n{table}");
        }
        let json = serde_json::to_value(&measured).unwrap();
        assert_eq!(json["ttl_ms"], 3000);
        assert_eq!(json["hold"]["locks"], 200);
        assert_eq!(json["hold"]["write_syscalls_per_sec"], 150.0);
        assert_eq!(json["hold"]["bytes_written_per_sec"], 15000.0);
        assert_eq!(json["hold"]["rss_per_lock_bytes"], 2048.0);

        let blind = hold_report(None);
        let table = blind.table();
        assert!(
            table.contains("write syscalls/s                 n/a"),
            "{table}"
        );
        assert!(
            table.contains("RSS per held lock                n/a"),
            "{table}"
        );
        let json = serde_json::to_value(&blind).unwrap();
        assert!(json["hold"]["write_syscalls_per_sec"].is_null());
        assert!(json["hold"]["rss_per_lock_bytes"].is_null());
    }
}
