//! [`EtcdCore`]: what a backend, its held locks and its background tasks
//! share — the client, the config, the sessions, the watch hub and the
//! entry names in use — and the retry budget of a request.
//!
//! Every module that talks to etcd takes its state from here; this module
//! knows none of them.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use etcd_client::Client;
use lock_core::backend::{Leaving, WaitMode};

use crate::config::EtcdConfig;
use crate::names::EntryNames;
use crate::session::Sessions;
use crate::watch::WatchHub;

/// The state of one backend, behind an `Arc`: held locks and background
/// tasks keep it (or a `Weak` of it) rather than the backend.
pub(crate) struct EtcdCore {
    pub(crate) client: Client,
    pub(crate) config: EtcdConfig,
    /// One session lease per ttl in use.
    pub(crate) sessions: Sessions,
    /// Every watch of the backend, on one stream.
    pub(crate) hub: WatchHub,
    /// The queue entry names in use.
    pub(crate) names: EntryNames,
    /// Deletions of abandoned queue entries under way, per queue prefix:
    /// the backend's next acquisition on that queue waits for them.
    pub(crate) leaving: Arc<Leaving>,
}

impl EtcdCore {
    /// The state of a backend talking to the cluster through `client`.
    pub(crate) fn new(client: Client, config: EtcdConfig) -> Self {
        Self {
            sessions: Sessions::new(client.clone(), config.response_timeout),
            hub: WatchHub::new(client.watch_client()),
            names: EntryNames::default(),
            leaving: Arc::default(),
            client,
            config,
        }
    }

    /// Until when a request made now may be retried while the cluster is
    /// unavailable: the caller's deadline, and at most `response_timeout`
    /// (a store that is down ends a wait with `Unavailable`, it does not
    /// turn it into a longer wait).
    pub(crate) fn retry_deadline(&self, wait: WaitMode) -> Instant {
        let budget = Instant::now() + self.config.response_timeout;
        match wait.deadline() {
            Some(deadline) => deadline.min(budget),
            None => budget,
        }
    }
}

impl fmt::Debug for EtcdCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdCore")
            .field("config", &self.config)
            .field("sessions", &self.sessions)
            .finish_non_exhaustive()
    }
}
