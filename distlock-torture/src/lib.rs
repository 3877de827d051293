//! The torture runner: distlock under faults, on every store and topology
//! this machine can start, with what it survived in figures.
//!
//! Client tasks (inside the runner) and client processes (one client
//! each, behind their own fault proxies) loop over a few keys — locks, an
//! election and a semaphore ([`primitive`]): take one, present the
//! fencing token to a fencing-checked [`register`], write a few times
//! while the guard says the hold is ours, release. Meanwhile the
//! [`nemesis`] injects the selected [`faults`] by turns — frozen and killed
//! holders, killed and frozen servers, partitions, latency, leaders killed
//! — and heals each one. The register judges every operation on the
//! machine's monotonic clock and counts overlaps, unsafe writes accepted,
//! token regressions, stale writes refused and losses signalled; after the
//! run, keys still held one ttl later are leftovers. Each [`report::Row`]
//! says whether the store's README promises safety there, and whether the
//! run was safe.
//!
//! The `distlock-torture` binary drives it; see its `--help`.

#![deny(missing_docs)]

pub mod client;
pub mod clock;
pub mod deployment;
pub mod faults;
pub mod fleet;
pub mod link;
pub mod nemesis;
pub mod peers;
pub mod plan;
pub mod primitive;
pub mod register;
pub mod report;
pub mod run;
mod trail;

pub use deployment::Topology;
pub use faults::Fault;
pub use plan::Plan;
pub use report::Row;
pub use run::run;
