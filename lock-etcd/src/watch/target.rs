//! [`Watch`]: one watch as the hub's task keeps it — its key, where it
//! resumes after a reconnect, and [`Target`], who hears it.

use etcd_client::{WatchFilterType, WatchOptions};

use super::fired::{Listener, RangeListener};
use super::waiters::Waiters;

/// One deletion watch, as the hub's task keeps it.
pub(super) struct Watch {
    pub(super) key: Vec<u8>,
    /// The revision to (re)start from: after the last event seen.
    pub(super) next_revision: i64,
    pub(super) target: Target,
}

/// Who hears a watch.
pub(super) enum Target {
    /// One listener; the watch ends with the first deletion.
    Once(Listener),
    /// Waiters, who come and go; the watch lingers between them.
    Waiters(Waiters),
    /// Every event under the watch's key as a prefix, until dropped.
    Range(RangeListener),
}

impl Watch {
    /// The options that create it on the server as watch `id`, from
    /// where it resumes.
    pub(super) fn options(&self, id: i64) -> WatchOptions {
        let options = WatchOptions::new()
            .with_start_revision(self.next_revision)
            .with_watch_id(id);
        match self.target {
            // Only deletions matter; puts of a reused entry name would
            // only be traffic.
            Target::Waiters(_) => options.with_filters([WatchFilterType::NoPut]),
            Target::Once(_) => options,
            Target::Range(_) => options.with_prefix(),
        }
    }
}
