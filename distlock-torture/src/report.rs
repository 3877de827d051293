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

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
