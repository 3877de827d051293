//! A run's rows: as a table or as JSON.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::faults::Fault;
use crate::plan::Plan;
use crate::register::Figures;

/// What one store, topology and set of faults did.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The store (URL scheme).
    pub store: &'static str,
    /// The deployment.
    pub topology: &'static str,
    /// The fault classes, joined with `+`.
    pub faults: String,
    /// How long the clients ran, in seconds.
    pub seconds: f64,
    /// Client tasks plus client processes.
    pub clients: usize,
    /// How many faults of each class were injected.
    pub injected: BTreeMap<&'static str, u64>,
    /// What the register counted.
    #[serde(flatten)]
    pub figures: Figures,
    /// Keys still held one ttl after every client stopped.
    pub leftovers: u64,
    /// Client processes that did not stop within four ttls when asked
    /// (killed; their locks expire by themselves).
    pub killed_at_stop: usize,
    /// Whether the store's README promises safety under these faults.
    pub documented_safe: bool,
    /// For each fault class of the row, whether the store's README
    /// promises safety under it.
    pub documented: BTreeMap<&'static str, bool>,
    /// No overlap, no unsafe write accepted, no token regression and no
    /// leftover.
    pub safe: bool,
}

impl Row {
    /// The row of `plan`.
    pub fn new(
        plan: &Plan,
        seconds: f64,
        injected: BTreeMap<Fault, u64>,
        figures: Figures,
        leftovers: u64,
        killed_at_stop: usize,
    ) -> Self {
        let safe = figures.overlaps == 0
            && figures.unsafe_accepted == 0
            && figures.token_regressions == 0
            && leftovers == 0;
        Row {
            store: plan.topology.store(),
            topology: plan.topology.name(),
            faults: plan
                .faults
                .iter()
                .map(|f| f.name())
                .collect::<Vec<_>>()
                .join("+"),
            seconds,
            clients: plan.tasks + plan.processes,
            injected: injected.into_iter().map(|(f, n)| (f.name(), n)).collect(),
            figures,
            leftovers,
            killed_at_stop,
            documented_safe: plan.faults.iter().all(|f| f.documented_safe(plan.topology)),
            documented: plan
                .faults
                .iter()
                .map(|f| (f.name(), f.documented_safe(plan.topology)))
                .collect(),
            safe,
        }
    }

    /// True when the docs promise safety here and the run broke it.
    pub fn broke_a_promise(&self) -> bool {
        self.documented_safe && !self.safe
    }
}

/// The rows as a Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| store | topology | faults | s | injected | acquired (leaders, permits) | losses | stale refused | overlaps | unsafe accepted | token regressions | leftovers | longest idle wait ms | documented safe | safe |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n",
    );
    for row in rows {
        let f = &row.figures;
        let injected: u64 = row.injected.values().sum();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {} | {} ({}, {}) | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row.store,
            row.topology,
            row.faults,
            row.seconds,
            injected,
            f.acquisitions,
            f.leaderships,
            f.permits,
            f.losses,
            f.stale_rejected,
            f.overlaps,
            f.unsafe_accepted,
            f.token_regressions,
            row.leftovers,
            f.longest_idle_wait_ms,
            yes_no(row.documented_safe),
            if row.safe { "yes" } else { "**NO**" },
        );
    }
    out
}

/// The rows as a Markdown table of topology × fault class: for each
/// class a topology ran under, whether its docs promise safety and what
/// the rows with that class measured (how often it was injected in them).
pub fn matrix(rows: &[Row]) -> String {
    let mut out = String::from("| store | topology |");
    for fault in Fault::ALL {
        let _ = write!(out, " {fault} |");
    }
    out.push_str("\n|---|---|");
    out.push_str(&"---|".repeat(Fault::ALL.len()));
    out.push('\n');
    let mut deployments: Vec<(&str, &str)> = Vec::new();
    for row in rows {
        if !deployments.contains(&(row.store, row.topology)) {
            deployments.push((row.store, row.topology));
        }
    }
    for (store, topology) in deployments {
        let of_deployment: Vec<&Row> = rows
            .iter()
            .filter(|r| (r.store, r.topology) == (store, topology))
            .collect();
        let _ = write!(out, "| {store} | {topology} |");
        for fault in Fault::ALL {
            let _ = write!(out, " {} |", cell(&of_deployment, fault.name()));
        }
        out.push('\n');
    }
    out
}

/// One class's cell in [`matrix`]: "safe", "**UNSAFE**" (a broken
/// promise), "unsafe as documented", or "not promised, none seen", with
/// the injections; "–" when no row ran it.
fn cell(rows: &[&Row], fault: &str) -> String {
    let with: Vec<&&Row> = rows
        .iter()
        .filter(|r| r.injected.contains_key(fault))
        .collect();
    if with.is_empty() {
        return "–".to_owned();
    }
    let injected: u64 = with.iter().map(|r| r.injected[fault]).sum();
    let promised = with.iter().all(|r| r.documented[fault]);
    let measured_safe = with.iter().all(|r| r.safe);
    let verdict = match (promised, measured_safe) {
        (true, true) => "safe",
        (true, false) => "**UNSAFE**",
        (false, false) => "unsafe as documented",
        (false, true) => "not promised, none seen",
    };
    format!("{verdict} ×{injected}")
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(topology: &'static str, faults: &[(Fault, bool)], safe: bool) -> Row {
        Row {
            store: "redis",
            topology,
            faults: String::new(),
            seconds: 1.0,
            clients: 1,
            injected: faults.iter().map(|(f, _)| (f.name(), 3)).collect(),
            figures: Figures::default(),
            leftovers: 0,
            killed_at_stop: 0,
            documented_safe: faults.iter().all(|(_, promised)| *promised),
            documented: faults.iter().map(|(f, p)| (f.name(), *p)).collect(),
            safe,
        }
    }

    #[test]
    fn the_matrix_tells_promises_kept_broken_and_not_made() {
        let rows = [
            row(
                "a",
                &[(Fault::HolderPause, true), (Fault::Latency, true)],
                true,
            ),
            row("a", &[(Fault::ServerKill, false)], false),
            row("b", &[(Fault::HolderPause, true)], false),
            row("b", &[(Fault::ServerKill, false)], true),
        ];
        let text = matrix(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        // Columns in Fault::ALL order: holder-pause, holder-kill,
        // server-kill, server-pause, partition, latency, member-kill.
        assert_eq!(
            lines[2],
            "| redis | a | safe ×3 | – | unsafe as documented ×3 | – | – | safe ×3 | – |"
        );
        assert_eq!(
            lines[3],
            "| redis | b | **UNSAFE** ×3 | – | not promised, none seen ×3 | – | – | – | – |"
        );
    }
}
