//! Conformance and fault tests for distlock, and the harness they run on.
//!
//! The [`harness`] module starts real servers (redis-server, etcd,
//! ZooKeeper, ...) on free loopback ports with temp data dirs, injects
//! network faults through a TCP proxy, and checks fencing tokens. See
//! `DESIGN.md` §7 and §8.

pub mod etcd;
pub mod harness;
pub mod outage;
pub mod queue;
pub mod redis;
pub mod zookeeper;

/// `base` with the options `query` (`a=1&b=2`) appended, whether or not
/// it has a query already.
pub fn with_query(base: &str, query: &str) -> String {
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{base}{separator}{query}")
}
