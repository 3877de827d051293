//! What a watcher of a holder channel hears from one server, and the
//! sending end of its queue.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

/// What a watcher of a holder channel hears from one server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HolderEvent {
    /// A message's payload, in the order the server sent them.
    Message(Vec<u8>),
    /// Messages may have been missed since the last read: the connection
    /// broke, or the watcher's queue was full.
    Missed,
}

/// Where one watcher's events go.
#[derive(Clone, Debug)]
pub(super) struct EventSender {
    pub(super) queue: mpsc::Sender<HolderEvent>,
    pub(super) overflowed: Arc<AtomicBool>,
}

impl EventSender {
    /// Queues `event`; if the queue is full, marks the watcher as having
    /// missed events instead.
    pub(super) fn send(&self, event: HolderEvent) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.queue.try_send(event) {
            self.overflowed.store(true, Ordering::SeqCst);
        }
    }
}
