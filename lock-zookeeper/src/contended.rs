//! Which lock directories a session last found busy.
//!
//! An acquire enters the queue in one of two ways (see [`crate::locks`]):
//! where the lock is likely free, a transaction that creates our node and
//! reports how many nodes the directory holds, so that a free lock needs no
//! listing at all; where it is likely busy, a create with a listing
//! pipelined behind it, so that a waiter learns its place in the same round
//! trip. Which is likely is what the session's latest acquisition in that
//! directory found: this set remembers the directories where it had to
//! wait behind others.
//!
//! Only a hint: a wrong guess costs a listing the lock did not need (a free
//! lock that was busy before) or a listing sent one round trip later (the
//! other way round), never correctness.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

/// How many busy directories a session remembers; when full, it forgets
/// them all and starts over.
const CAPACITY: usize = 1024;

/// The set of directories where this session's latest acquisition had to
/// wait behind others.
#[derive(Debug, Default)]
pub(crate) struct ContendedDirs {
    dirs: Mutex<HashSet<String>>,
}

impl ContendedDirs {
    /// Whether the latest acquisition in `dir` found others ahead.
    pub(crate) fn was_contended(&self, dir: &str) -> bool {
        self.lock().contains(dir)
    }

    /// Records whether an acquisition in `dir` found others ahead.
    pub(crate) fn record(&self, dir: &str, contended: bool) {
        let mut dirs = self.lock();
        if !contended {
            dirs.remove(dir);
            return;
        }
        if dirs.contains(dir) {
            return;
        }
        if dirs.len() >= CAPACITY {
            dirs.clear();
        }
        dirs.insert(dir.to_owned());
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<String>> {
        // The set holds no invariant a panicking holder could break.
        self.dirs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_the_latest_outcome_per_directory() {
        let dirs = ContendedDirs::default();
        assert!(!dirs.was_contended("/a"));
        dirs.record("/a", true);
        dirs.record("/b", false);
        assert!(dirs.was_contended("/a"));
        assert!(!dirs.was_contended("/b"));
        dirs.record("/a", false);
        assert!(!dirs.was_contended("/a"));
    }

    #[test]
    fn stays_bounded() {
        let dirs = ContendedDirs::default();
        for i in 0..CAPACITY * 3 {
            dirs.record(&format!("/d{i}"), true);
            assert!(dirs.lock().len() <= CAPACITY);
        }
        assert!(dirs.was_contended(&format!("/d{}", CAPACITY * 3 - 1)));
    }
}
