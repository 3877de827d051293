//! What a watch of the hub reports to its listener.

use etcd_client::Event;

/// What a watch reports to its listener: `Created` (again after each
/// reconnect), then at most one of the others, which end the watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fired {
    /// etcd created the watch; every change after `revision` will be
    /// reported.
    Created {
        /// The store's revision when the watch was created.
        revision: i64,
    },
    /// The key was deleted.
    Deleted {
        /// The revision of the deletion.
        revision: i64,
    },
    /// The history from the watch's start revision is compacted: whatever
    /// happened to the key is unknown; read it again.
    Compacted,
    /// etcd refused the watch (for example: permission denied).
    Refused(String),
}

/// Called from the hub's task with what the watch reports; must not block.
pub(crate) type Listener = Box<dyn FnMut(Fired) + Send + Sync>;

/// What a prefix watch reports: the events of each response, in the
/// store's order, until one of the others ends the watch.
#[derive(Debug)]
pub(crate) enum RangeFired {
    /// The events of one response: whole revisions, oldest first.
    Events(Vec<Event>),
    /// The history from the watch's start revision is compacted.
    Compacted,
    /// etcd refused the watch (for example: permission denied).
    Refused(String),
}

/// Called from the hub's task with what a prefix watch reports; must not
/// block.
pub(crate) type RangeListener = Box<dyn FnMut(RangeFired) + Send + Sync>;
