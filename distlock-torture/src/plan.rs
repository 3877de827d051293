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
