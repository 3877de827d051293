//! [`RedisCore`]: what every part of a backend on one instance, a cluster
//! or a Sentinel master shares — the connection and its deadlines, the
//! pub/sub listener, the renewal queue, the clean-ups under way and how
//! a lock's names are built.
//!
//! The backend, its holds, waits and watches each keep an `Arc` of it;
//! this module uses none of them.

use std::sync::Arc;
use std::time::Duration;

use lock_core::LockName;

use crate::config::RedisConfig;
use crate::conn::Conn;
use crate::counter::Counters;
use crate::deadline::Timeouts;
use crate::keys::LockKeys;
use crate::pubsub::Listener;
use crate::renewal::Renewer;
use lock_core::backend::Leaving;

/// How long a queued waiter stays in line without renewing its place
/// (see [`queue`](crate::queue)); the acquire script is told it, and the
/// clean-up of an abandoned place retries at least this long.
pub(crate) const WAITER_LIFE: Duration = Duration::from_secs(3);

/// The shared state of one backend on an instance, a cluster or a
/// Sentinel master.
pub(crate) struct RedisCore {
    /// Where commands and scripts go.
    pub(crate) conn: Conn,
    /// The bound of each of them.
    pub(crate) timeouts: Timeouts,
    /// Hand-offs, releases and holder changes heard on pub/sub.
    pub(crate) listener: Listener,
    /// The batched renewals of every exclusive hold.
    pub(crate) renewer: Renewer,
    /// Clean-ups of abandoned acquisitions under way.
    pub(crate) leaving: Arc<Leaving>,
    /// How locks share fencing counters: per namespace, or per namespace
    /// and slot on a cluster.
    pub(crate) counters: Counters,
    /// The settings the backend was opened with.
    pub(crate) config: RedisConfig,
}

impl RedisCore {
    /// The Redis names of the lock `name`.
    pub(crate) fn keys(&self, name: &LockName) -> LockKeys {
        LockKeys::new(name, self.counters)
    }
}
