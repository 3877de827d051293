//! Which entries of `layout=concurrency` are this process's, and whose.
//!
//! In that layout an entry's value is the holder's value alone (what Go
//! clients and `etcdctl` read), so the owner id of a distlock holder is
//! stored nowhere in etcd. This process remembers the owner of each entry
//! its lockers make, keyed by the entry's key (and, once known, its
//! create revision), from before the entry's put is sent until a while
//! after it is gone: `inspect` and watches of every locker in the process
//! report a hold of this process with its owner id, even when they
//! process an event after the hold ended. Entries of other processes
//! (Go clients, `etcdctl`, distlock elsewhere) are reported with their
//! etcd key as the owner.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use lock_core::OwnerId;

/// How long an entry's owner is remembered after its hold ended: longer
/// than a watch takes to process the events of a hold.
const REMEMBERED_FOR: Duration = Duration::from_secs(30);

/// One remembered owner.
struct Known {
    /// Tells apart the records of one key.
    id: u64,
    /// The entry's create revision, once its put was answered.
    revision: Option<i64>,
    owner: String,
}

/// The owners of the entries this process made.
#[derive(Default)]
struct Owners {
    next_id: u64,
    by_key: HashMap<Vec<u8>, Vec<Known>>,
    /// Records whose hold ended, by when they are forgotten.
    ending: VecDeque<(Instant, Vec<u8>, u64)>,
}

fn owners() -> MutexGuard<'static, Owners> {
    static OWNERS: OnceLock<Mutex<Owners>> = OnceLock::new();
    let owners = OWNERS.get_or_init(Mutex::default);
    owners.lock().unwrap_or_else(|p| p.into_inner())
}

impl Owners {
    /// Forgets the records whose time is up.
    fn prune(&mut self, now: Instant) {
        while let Some((at, _, _)) = self.ending.front() {
            if *at > now {
                break;
            }
            let Some((_, key, id)) = self.ending.pop_front() else {
                break;
            };
            if let Some(records) = self.by_key.get_mut(&key) {
                records.retain(|known| known.id != id);
                if records.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
    }
}

/// Our owner id of one entry, remembered while this record lives and
/// for a while after.
pub(crate) struct OwnerRecord {
    key: Vec<u8>,
    id: u64,
}

impl OwnerRecord {
    /// Remembers that the entry `key` about to be put is `owner`'s.
    pub(crate) fn register(key: &[u8], owner: &OwnerId) -> Self {
        let mut owners = owners();
        owners.prune(Instant::now());
        owners.next_id += 1;
        let id = owners.next_id;
        owners.by_key.entry(key.to_vec()).or_default().push(Known {
            id,
            revision: None,
            owner: owner.as_str().to_owned(),
        });
        Self {
            key: key.to_vec(),
            id,
        }
    }

    /// The entry was created at `revision`.
    pub(crate) fn created_at(&self, revision: i64) {
        let mut owners = owners();
        if let Some(known) = owners
            .by_key
            .get_mut(&self.key)
            .and_then(|records| records.iter_mut().find(|known| known.id == self.id))
        {
            known.revision = Some(revision);
        }
    }
}

impl Drop for OwnerRecord {
    fn drop(&mut self) {
        let key = std::mem::take(&mut self.key);
        owners()
            .ending
            .push_back((Instant::now() + REMEMBERED_FOR, key, self.id));
    }
}

impl fmt::Debug for OwnerRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.key))
    }
}

/// The owner of the entry `key` created at `revision`: our owner id if a
/// locker of this process made it, else the key itself.
pub(crate) fn owner_of(key: &[u8], revision: i64) -> String {
    let owners = owners();
    let records = owners
        .by_key
        .get(key)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let exact = records
        .iter()
        .find(|known| known.revision == Some(revision));
    // A put whose answer has not come back yet may be the one seen.
    let pending = || records.iter().rev().find(|known| known.revision.is_none());
    match exact.or_else(pending) {
        Some(known) => known.owner.clone(),
        None => String::from_utf8_lossy(key).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_entries_name_their_owner_and_others_their_key() {
        let owner = OwnerId::generate();
        let record = OwnerRecord::register(b"owners-test/k/1a", &owner);
        assert_eq!(owner_of(b"owners-test/k/1a", 7), owner.as_str());
        record.created_at(7);
        assert_eq!(owner_of(b"owners-test/k/1a", 7), owner.as_str());
        assert_eq!(owner_of(b"owners-test/k/1a", 9), "owners-test/k/1a");
        drop(record);
        // Remembered a while after the hold.
        assert_eq!(owner_of(b"owners-test/k/1a", 7), owner.as_str());
        assert_eq!(owner_of(b"owners-test/k/2b", 7), "owners-test/k/2b");
    }
}
