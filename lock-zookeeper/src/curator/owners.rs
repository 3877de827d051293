//! Owner ids of the Curator-layout nodes this process created.
//!
//! A Curator node stores only the holder's data (its value), no owner id.
//! A hold taken through this process registers its node's id (the UUID in
//! the node's name) with its owner id before the node is created, so that
//! every locker of this process reports its own holders by owner id.
//! Nodes of other processes (Curator clients, or distlock in another
//! process) are reported with their node name as the owner.
//!
//! An entry outlives its hold by [`KEPT_AFTER_END`]: a read of the node
//! that was answered just before its release is turned into a holder
//! after the release, and must still find the owner. Entries older than
//! that are dropped whenever one is added, so the table holds only the
//! holds of that last stretch of time.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How long an owner id stays known after its hold ended.
const KEPT_AFTER_END: Duration = Duration::from_secs(30);

/// An owner id, and when its hold ended (if it did).
#[derive(Debug)]
struct Entry {
    owner: String,
    ended: Option<Instant>,
}

use lock_core::{FencingToken, LockInfo};

use crate::names::NodeName;

/// Node id → owner id, for nodes of this process.
fn owners() -> MutexGuard<'static, HashMap<String, Entry>> {
    static OWNERS: OnceLock<Mutex<HashMap<String, Entry>>> = OnceLock::new();
    OWNERS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The owner id of node id `guid` while it lives; forgotten
/// [`KEPT_AFTER_END`] after it is dropped.
#[derive(Debug)]
pub(crate) struct Registered {
    guid: String,
}

impl Registered {
    /// Registers `owner` as the owner of the node with id `guid`.
    pub(crate) fn new(guid: &str, owner: &str) -> Self {
        let mut owners = owners();
        let now = Instant::now();
        owners.retain(|_, entry| {
            entry
                .ended
                .is_none_or(|ended| now.duration_since(ended) < KEPT_AFTER_END)
        });
        let entry = Entry {
            owner: owner.to_owned(),
            ended: None,
        };
        owners.insert(guid.to_owned(), entry);
        Self {
            guid: guid.to_owned(),
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Some(entry) = owners().get_mut(&self.guid) {
            entry.ended = Some(Instant::now());
        }
    }
}

/// The holder Curator node `node` describes: its data is the value (bytes
/// that are not UTF-8 replaced), its owner the registered owner id or
/// else the node's name, its token the czxid.
pub(crate) fn lock_info(node: &NodeName<'_>, data: &[u8], czxid: i64) -> LockInfo {
    let owner = (!node.guid.is_empty())
        .then(|| owners().get(node.guid).map(|entry| entry.owner.clone()))
        .flatten()
        .unwrap_or_else(|| node.name.to_owned());
    LockInfo::new(owner, FencingToken::new(czxid.unsigned_abs()), None)
        .with_value(String::from_utf8_lossy(data))
}
