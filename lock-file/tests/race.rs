//! Holders contending on one name while every release removes the name's
//! files: threads, each with its own backend (so its own open files, as
//! separate processes have), try to take the name over and over, hold it
//! for an instant and release it. Shared counters check that there is
//! never more than one holder of a lock (or a writer beside readers, or
//! more permits than the limit), and that tokens handed out in turn never
//! go down: the fenced resource's view. An acquirer that locks a file a
//! release has just removed, and does not notice (the inode check after
//! `flock`), holds it beside whoever creates the next file. (The unit
//! tests of `exclusive` and `shared` force that interleaving for one
//! writer and one reader.)

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use common::locker;
use lock_core::{LockGuard, Locker};
use tokio::runtime::Runtime;

const THREADS: usize = 8;
const ROUNDS: usize = 500;

/// What the threads saw: holds taken, and every breach.
#[derive(Default)]
struct Ledger {
    /// Exclusive holders (or writers) inside now.
    writers: AtomicUsize,
    /// Readers (or permits) inside now.
    shared: AtomicUsize,
    taken: AtomicUsize,
    breaches: Mutex<Vec<String>>,
    /// The highest token a writer brought to the resource.
    fence: Mutex<u64>,
}

impl Ledger {
    fn breach(&self, what: String) {
        self.breaches.lock().unwrap().push(what);
    }

    /// A writer's turn: alone inside, with a token above every earlier
    /// writer's.
    fn write(&self, guard: &LockGuard) {
        let writers = self.writers.fetch_add(1, Ordering::SeqCst);
        let readers = self.shared.load(Ordering::SeqCst);
        if writers != 0 || readers != 0 {
            self.breach(format!(
                "a writer beside {writers} writers and {readers} readers"
            ));
        }
        {
            let mut fence = self.fence.lock().unwrap();
            if guard.token().get() <= *fence {
                self.breach(format!("token {} after {}", guard.token(), *fence));
            }
            *fence = guard.token().get();
        }
        stay_a_moment();
        self.writers.fetch_sub(1, Ordering::SeqCst);
        self.taken.fetch_add(1, Ordering::SeqCst);
    }

    /// A shared holder's turn: no writer inside, at most `limit` of them.
    fn share(&self, limit: usize) {
        let inside = self.shared.fetch_add(1, Ordering::SeqCst) + 1;
        let writers = self.writers.load(Ordering::SeqCst);
        if writers != 0 || inside > limit {
            self.breach(format!(
                "{inside} shared holders (limit {limit}) beside {writers} writers"
            ));
        }
        stay_a_moment();
        self.shared.fetch_sub(1, Ordering::SeqCst);
        self.taken.fetch_add(1, Ordering::SeqCst);
    }

    fn assert_clean(&self, what: &str) {
        let breaches = self.breaches.lock().unwrap();
        let overlaps = breaches
            .iter()
            .filter(|b| !b.starts_with("release"))
            .count();
        assert!(
            breaches.is_empty(),
            "{what}: {} breaches, {overlaps} of them overlaps or tokens out of order, first: {:?}",
            breaches.len(),
            breaches
                .iter()
                .find(|b| !b.starts_with("release"))
                .or(breaches.first())
        );
        assert_eq!(
            self.taken.load(Ordering::SeqCst),
            THREADS * ROUNDS,
            "{what}"
        );
    }
}

/// A holder's stay inside: long enough for a second holder, if there
/// were one, to come in meanwhile.
fn stay_a_moment() {
    for _ in 0..4 {
        std::thread::yield_now();
    }
}

/// Runs `round(thread, locker, ledger, runtime)` (one attempt) until it
/// gives a hold, [`ROUNDS`] times, on each of [`THREADS`] threads, each
/// with its own backend and runtime, releasing every hold; then checks
/// that the lock directory holds only the namespace's counters.
fn contend(
    round: impl Fn(usize, &Locker, &Ledger, &Runtime) -> Option<LockGuard> + Sync,
) -> Ledger {
    // One contention at a time: the tests of this file would otherwise
    // share the cores and each would race less.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::default();
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (dir, ledger, round) = (dir.path(), &ledger, &round);
            scope.spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let _entered = runtime.enter();
                let locks = locker(dir);
                for _ in 0..ROUNDS {
                    let guard = loop {
                        match round(thread, &locks, ledger, &runtime) {
                            Some(guard) => break guard,
                            None => std::thread::yield_now(),
                        }
                    };
                    // A hold whose file another acquirer replaced.
                    if let Err(error) = runtime.block_on(guard.release()) {
                        ledger.breach(format!("release: {error}"));
                    }
                }
            });
        }
    });
    let left: Vec<_> = std::fs::read_dir(dir.path().join("default"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        left.iter().all(|name| name.starts_with(".tokens-")),
        "{left:?}"
    );
    ledger
}

#[test]
fn exclusive_holders_never_overlap_while_releases_remove_the_file() {
    let ledger = contend(|_, locks, ledger, runtime| {
        let guard = runtime.block_on(locks.try_lock("k")).unwrap()?;
        ledger.write(&guard);
        Some(guard)
    });
    ledger.assert_clean("exclusive");
}

/// Two reader threads and six writer threads: writers' releases remove
/// the file often, and readers race to open it in between.
#[test]
fn readers_and_writers_never_overlap_while_the_last_reader_removes_the_file() {
    let ledger = contend(|thread, locks, ledger, runtime| {
        let cfg = locks.rwlock("k").unwrap();
        if thread % 4 != 0 {
            let guard = runtime.block_on(cfg.try_write()).unwrap()?;
            ledger.write(&guard);
            Some(guard)
        } else {
            let guard = runtime.block_on(cfg.try_read()).unwrap()?;
            ledger.share(usize::MAX);
            Some(guard)
        }
    });
    ledger.assert_clean("read-write");
}

#[test]
fn permits_never_exceed_the_limit_while_the_last_one_removes_the_files() {
    let ledger = contend(|_, locks, ledger, runtime| {
        let pool = locks.semaphore("k", 2).unwrap();
        let guard = runtime.block_on(pool.try_acquire()).unwrap()?;
        ledger.share(2);
        Some(guard)
    });
    ledger.assert_clean("permits");
}
