//! [`Plan`]: what one row of a run is asked to do.

use std::path::PathBuf;
use std::time::Duration;

use crate::deployment::Topology;
use crate::faults::Fault;

/// What one row runs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The deployment.
    pub topology: Topology,
    /// The faults, injected by turns (each at least once).
    pub faults: Vec<Fault>,
    /// How long clients run (longer if the faults need it).
    pub duration: Duration,
    /// Client tasks inside the runner.
    pub tasks: usize,
    /// Client processes (one client each).
    pub processes: usize,
    /// Locks the clients share (besides one election and, where the
    /// store has semaphores, one semaphore).
    pub keys: usize,
    /// The lease of every lock.
    pub ttl: Duration,
    /// The `distlock-torture` program, started for client processes.
    pub program: PathBuf,
}

/// The rows a schedule runs for one topology, as sets of fault classes.
///
/// Unmixed: one row per class. Mixed: one row with every class the docs
/// call safe on this topology (a row that fails the run when violated),
/// and one row per class they do not (a row that shows the documented
/// violation, attributed to that class alone).
pub fn rows_for(topology: Topology, faults: &[Fault], mix: bool) -> Vec<Vec<Fault>> {
    if !mix {
        return faults.iter().map(|f| vec![*f]).collect();
    }
    let (safe, unsafe_): (Vec<Fault>, Vec<Fault>) = faults
        .iter()
        .partition(|fault| fault.documented_safe(topology));
    let mut rows = Vec::new();
    if !safe.is_empty() {
        rows.push(safe);
    }
    rows.extend(unsafe_.into_iter().map(|f| vec![f]));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applicable(topology: Topology) -> Vec<Fault> {
        Fault::ALL
            .into_iter()
            .filter(|f| f.applies_to(topology))
            .collect()
    }

    #[test]
    fn a_mixed_schedule_gates_every_safe_class_and_isolates_the_others() {
        let sentinel = rows_for(
            Topology::RedisSentinel,
            &applicable(Topology::RedisSentinel),
            true,
        );
        assert_eq!(
            sentinel,
            [
                vec![Fault::HolderPause, Fault::HolderKill],
                vec![Fault::ServerKill],
                vec![Fault::ServerPause],
                vec![Fault::MemberKill],
            ]
        );
        let redlock = rows_for(Topology::Redlock, &applicable(Topology::Redlock), true);
        assert_eq!(
            redlock,
            [
                vec![
                    Fault::HolderPause,
                    Fault::HolderKill,
                    Fault::ServerPause,
                    Fault::Partition,
                    Fault::Latency
                ],
                vec![Fault::ServerKill],
            ]
        );
        // Every class of every topology is in exactly one row, and a row
        // of several classes holds only classes documented safe.
        for topology in Topology::ALL {
            let faults = applicable(topology);
            let rows = rows_for(topology, &faults, true);
            let mut seen: Vec<Fault> = rows.iter().flatten().copied().collect();
            seen.sort();
            assert_eq!(seen, faults, "{topology}");
            for row in rows.iter().filter(|row| row.len() > 1) {
                assert!(
                    row.iter().all(|f| f.documented_safe(topology)),
                    "{topology}: {row:?}"
                );
            }
        }
    }

    #[test]
    fn an_unmixed_schedule_is_one_row_per_class() {
        let faults = applicable(Topology::EtcdCluster);
        let rows = rows_for(Topology::EtcdCluster, &faults, false);
        assert_eq!(rows.len(), faults.len());
        assert!(rows.iter().all(|row| row.len() == 1));
    }
}
