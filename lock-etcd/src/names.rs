//! Queue entry names, reused by each session.
//!
//! etcd keeps every key ever written in its index until the history is
//! compacted, and a range read walks all of them, deleted or not. Every
//! acquisition reads its lock's queue by prefix, so if each acquisition
//! wrote a fresh key, a lock taken again and again would grow slower with
//! every use: measured here on one key of one etcd member without
//! compaction, each 1,000 lock+release cycles added about 0.1 ms to the
//! next acquisition.
//!
//! So a session names its entries `<lease>-<n>`, where `n` is the smallest
//! number that no other acquisition of the same lock in this process uses
//! on that lease. A locker taking one lock over and over writes one key,
//! and a queue's history holds one key per session and concurrent
//! acquisition.
//!
//! A name is reserved from before its entry is written until the entry is
//! known to be gone (released, withdrawn, or removed by the clean-up of an
//! abandoned call) and every task that used it is done. If that cannot be
//! confirmed, the name stays reserved for the life of the backend: a later
//! acquisition must never take over an entry an earlier one may still
//! own, nor have its entry deleted by a clean-up that arrives late.
//!
//! This is what lets a release (or a withdrawal) delete its entry with a
//! plain delete, which costs etcd less than a compare-and-delete
//! transaction: a delete names only the key, so it must never reach the
//! server after the key went to another acquisition. So "known to be gone"
//! means a delete was *answered* on its first try. A delete that was
//! retried, or whose answer never came (a timeout, a cut connection, a
//! cancelled call), may still be on its way; its name is never handed out
//! again (the next acquisition of the lock takes the next number), unless
//! the session ended, since names carry the session's lease.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::keys;

/// The entry names reserved by one backend, on all its leases.
#[derive(Debug, Default)]
pub(crate) struct EntryNames {
    reserved: Arc<Mutex<HashSet<Vec<u8>>>>,
}

impl EntryNames {
    /// Reserves the first free entry name under `prefix` for `lease`.
    #[cfg(test)]
    pub(crate) fn reserve(&self, prefix: &[u8], lease: i64) -> Arc<EntryName> {
        self.reserve_marked(prefix, lease, "")
    }

    /// Reserves the first free entry name under `prefix` for `lease`,
    /// ending in `mark` (see [`keys::queue_entry_marked`]).
    pub(crate) fn reserve_marked(&self, prefix: &[u8], lease: i64, mark: &str) -> Arc<EntryName> {
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        let key = (0u32..)
            .map(|n| keys::queue_entry_marked(prefix, lease, n, mark))
            .find(|key| !reserved.contains(key))
            .expect("fewer than 2^32 acquisitions of one lock at once");
        reserved.insert(key.clone());
        Arc::new(EntryName {
            key,
            reserved: Arc::clone(&self.reserved),
            gone: AtomicBool::new(false),
        })
    }
}

impl EntryNames {
    /// Reserves exactly `key`, if no acquisition of this backend has it
    /// (for layouts whose entry names are fixed, such as
    /// `layout=concurrency`'s `<prefix><lease-hex>`).
    pub(crate) fn try_reserve(&self, key: Vec<u8>) -> Option<Arc<EntryName>> {
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        if !reserved.insert(key.clone()) {
            return None;
        }
        Some(Arc::new(EntryName {
            key,
            reserved: Arc::clone(&self.reserved),
            gone: AtomicBool::new(false),
        }))
    }
}

/// One reserved entry name. The reservation ends when the last clone of
/// its `Arc` is dropped, if [`EntryName::mark_gone`] was called by then.
pub(crate) struct EntryName {
    key: Vec<u8>,
    reserved: Arc<Mutex<HashSet<Vec<u8>>>>,
    gone: AtomicBool,
}

impl EntryName {
    /// The entry's key.
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    /// The entry is known to be gone (or never made): the name may be
    /// handed out again once every user has dropped it.
    pub(crate) fn mark_gone(&self) {
        self.gone.store(true, Ordering::Relaxed);
    }
}

impl Drop for EntryName {
    fn drop(&mut self) {
        if self.gone.load(Ordering::Relaxed) {
            let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
            reserved.remove(&self.key);
        }
    }
}

impl fmt::Debug for EntryName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_reused_once_free_and_never_shared() {
        let names = EntryNames::default();
        let first = names.reserve(b"p/", 7);
        let second = names.reserve(b"p/", 7);
        assert_ne!(first.key(), second.key());
        let first_key = first.key().to_vec();
        first.mark_gone();
        drop(first);
        assert_eq!(names.reserve(b"p/", 7).key(), first_key);
    }

    #[test]
    fn other_locks_and_leases_count_on_their_own() {
        let names = EntryNames::default();
        let a = names.reserve(b"a/", 7);
        assert_eq!(names.reserve(b"b/", 7).key(), b"b/0000000000000007-0");
        assert_eq!(names.reserve(b"a/", 8).key(), b"a/0000000000000008-0");
        drop(a);
    }

    #[test]
    fn an_exact_name_is_reserved_once() {
        let names = EntryNames::default();
        let first = names.try_reserve(b"p/7".to_vec()).unwrap();
        assert!(names.try_reserve(b"p/7".to_vec()).is_none());
        first.mark_gone();
        drop(first);
        assert!(names.try_reserve(b"p/7".to_vec()).is_some());
    }

    #[test]
    fn a_name_whose_entry_may_exist_is_never_handed_out_again() {
        let names = EntryNames::default();
        let unsure = names.reserve(b"p/", 7);
        let unsure_key = unsure.key().to_vec();
        drop(unsure);
        assert_ne!(names.reserve(b"p/", 7).key(), unsure_key);
    }

    #[test]
    fn a_name_is_free_only_when_its_last_user_is_done() {
        let names = EntryNames::default();
        let name = names.reserve(b"p/", 7);
        let background = Arc::clone(&name);
        name.mark_gone();
        drop(name);
        assert_ne!(names.reserve(b"p/", 7).key(), background.key());
        let key = background.key().to_vec();
        drop(background);
        assert_eq!(names.reserve(b"p/", 7).key(), key);
    }
}
