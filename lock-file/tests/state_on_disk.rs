//! What the file store keeps on disk: once names are free, nothing but the
//! namespace directory and its token counters, however many names were
//! locked; tokens that keep rising although the files of free names go;
//! and directories written by earlier versions, whose lock files and
//! semaphore files hold tokens, counting on from those tokens.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::TempStore;
use lock_core::{LockOptions, Locker, LockerOptions};
use lock_file::{FileBackend, FileConfig, BUCKETS};

/// A locker in namespace `ns` on the lock directory `dir`.
fn locker(dir: &Path) -> Locker {
    common::locker(dir).with_namespace("ns").unwrap()
}

/// Every entry under `dir`, recursively, relative to it.
fn entries_under(dir: &Path) -> BTreeSet<PathBuf> {
    let mut found = BTreeSet::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path.clone());
            }
            found.insert(path.strip_prefix(dir).unwrap().to_path_buf());
        }
    }
    found
}

/// What stays of a namespace `ns` whose names are all free: its directory
/// and its [`BUCKETS`] token counters.
fn the_constant_state() -> BTreeSet<PathBuf> {
    let mut expected: BTreeSet<PathBuf> = (0..BUCKETS)
        .map(|bucket| PathBuf::from(format!("ns/.tokens-{bucket:x}")))
        .collect();
    expected.insert("ns".into());
    expected
}

/// One name's round of use, chosen by `i`: plain locks (held, contended,
/// inspected), read locks (shared, and a writer waiting behind a
/// reader), permits and elections; everything released at the end.
async fn use_name(locks: &Locker, i: usize) {
    let key = format!("name-{i}");
    match i % 10 {
        0..=3 => locks.lock(&key).await.unwrap().release().await.unwrap(),
        4 => {
            assert!(locks.inspect(&key).await.unwrap().is_none());
            let guard = locks.lock(&key).await.unwrap();
            assert!(locks.inspect(&key).await.unwrap().is_some());
            assert!(locks.try_lock(&key).await.unwrap().is_none());
            guard.release().await.unwrap();
        }
        5 => {
            let cfg = locks.rwlock(&key).unwrap();
            let (a, b) = (cfg.read().await.unwrap(), cfg.read().await.unwrap());
            assert_eq!(cfg.holders().await.unwrap().len(), 2);
            a.release().await.unwrap();
            b.release().await.unwrap();
            cfg.write().await.unwrap().release().await.unwrap();
        }
        6 => {
            // A writer waits behind a reader (marking the gate).
            let cfg = locks.rwlock(&key).unwrap();
            let reader = cfg.read().await.unwrap();
            let writer = {
                let cfg = locks.rwlock(&key).unwrap();
                tokio::spawn(async move { cfg.write().await.unwrap() })
            };
            tokio::time::sleep(Duration::from_millis(1)).await;
            reader.release().await.unwrap();
            writer.await.unwrap().release().await.unwrap();
        }
        7 => {
            let pool = locks.semaphore(&key, 2).unwrap();
            let (a, b) = (pool.acquire().await.unwrap(), pool.acquire().await.unwrap());
            assert!(pool.try_acquire().await.unwrap().is_none());
            assert_eq!(pool.holders().await.unwrap().len(), 2);
            a.release().await.unwrap();
            b.release().await.unwrap();
        }
        _ => {
            let election = locks.election(&key).unwrap();
            let leading = election.campaign(format!("node-{i}")).await.unwrap();
            assert!(election.leader().await.unwrap().is_some());
            leading.resign().await.unwrap();
        }
    }
}

/// 10,000 distinct names, used in parallel, leave exactly the namespace
/// directory and its counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_free_names_leave_only_the_counters() {
    const NAMES: usize = 10_000;
    const TASKS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let locks = locker(dir.path());
            tokio::spawn(async move {
                for i in (task..NAMES).step_by(TASKS) {
                    use_name(&locks, i).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    eprintln!("{NAMES} names in {:?}", started.elapsed());
    assert_eq!(entries_under(dir.path()), the_constant_state());
}

/// Lock, release (the file goes), lock again: a higher token, for every
/// kind of hold.
#[tokio::test]
async fn tokens_keep_rising_although_the_files_of_free_names_go() {
    let dir = tempfile::tempdir().unwrap();
    let locks = locker(dir.path());
    let mut last = 0;
    let mut next = |token: u64| {
        assert!(token > last, "token {token} after {last}");
        last = token;
    };
    for _ in 0..3 {
        let guard = locks.lock("k").await.unwrap();
        next(guard.token().get());
        guard.release().await.unwrap();
        assert_eq!(entries_under(dir.path()).len(), 2, "only ns/ and a counter");
        let read = locks.rwlock("k").unwrap().read().await.unwrap();
        next(read.token().get());
        read.release().await.unwrap();
        let write = locks.rwlock("k").unwrap().write().await.unwrap();
        next(write.token().get());
        write.release().await.unwrap();
        assert_eq!(entries_under(dir.path()).len(), 2, "only ns/ and a counter");
    }
    let mut last = 0;
    for _ in 0..3 {
        let permit = locks.semaphore("k", 3).unwrap().acquire().await.unwrap();
        assert!(permit.token().get() > last);
        last = permit.token().get();
        permit.release().await.unwrap();
        assert_eq!(entries_under(dir.path()).len(), 2, "only ns/ and a counter");
    }
}

/// A lock file of an earlier version, holding token 500: whichever way
/// the name is used next (lock, read lock, or an inspect that finds it
/// free and removes it), later tokens are above 500.
#[tokio::test]
async fn a_lock_file_of_an_earlier_version_is_a_floor_for_tokens() {
    for first_use in ["lock", "read", "inspect"] {
        let store = TempStore::new().in_namespace("ns");
        let (locks, path) = (&store.locks, store.lock_path("k"));
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, "500\nold-host/1/u\n").unwrap();
        let token = match first_use {
            "lock" => locks.lock("k").await.unwrap().token().get(),
            "read" => locks
                .rwlock("k")
                .unwrap()
                .read()
                .await
                .unwrap()
                .token()
                .get(),
            _ => {
                assert!(locks.inspect("k").await.unwrap().is_none());
                assert!(!path.exists(), "inspect left the free file");
                locks.lock("k").await.unwrap().token().get()
            }
        };
        assert!(token > 500, "{first_use}: token {token}");
        assert!(locks.lock("k").await.unwrap().token().get() > token);
    }
}

/// A semaphore of an earlier version, whose `meta` holds its counter.
#[tokio::test]
async fn a_semaphore_of_an_earlier_version_counts_on_from_its_meta() {
    let store = TempStore::new().in_namespace("ns");
    let (locks, path) = (&store.locks, store.lock_path("pool"));
    let permits = path.with_file_name("pool.permits");
    fs::create_dir_all(&permits).unwrap();
    fs::write(
        permits.join("meta"),
        "distlock semaphore\nlimit 2\ncounter 500\n",
    )
    .unwrap();
    let pool = locks.semaphore("pool", 2).unwrap();
    let first = pool.acquire().await.unwrap();
    assert!(first.token().get() > 500, "{}", first.token());
    first.release().await.unwrap();
    assert!(!permits.exists(), "the free semaphore's files stayed");
    assert!(pool.acquire().await.unwrap().token().get() > 501);
}

/// The file of a holder that was killed stays until the name is used
/// again: then the next holder's release, or an inspect, removes it.
#[tokio::test]
async fn a_dead_holders_file_goes_with_the_next_use_of_the_name() {
    let store = TempStore::new().in_namespace("ns");
    let (locks, path) = (&store.locks, store.lock_path("k"));
    let guard = locks.lock("k").await.unwrap();
    let token = guard.token().get();
    let record = fs::read(&path).unwrap();
    guard.release().await.unwrap();
    // What a killed holder leaves: its file, with its record, unlocked.
    fs::write(&path, &record).unwrap();
    assert!(locks.inspect("k").await.unwrap().is_none());
    assert!(!path.exists());
    assert!(locks.lock("k").await.unwrap().token().get() > token);
}

/// Purging removes the namespace directory, counters included; holders
/// learn at their next check that their locks are gone.
#[tokio::test]
async fn purging_a_namespace_removes_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let backend = FileBackend::open(FileConfig {
        check_interval: Some(Duration::from_millis(20)),
        ..FileConfig::new(dir.path())
    })
    .unwrap();
    let locks = Locker::new(Arc::new(backend), LockerOptions::default())
        .with_namespace("ns")
        .unwrap();
    let other = locks.with_namespace("other").unwrap();
    let (held, read, permit) = (
        locks.lock("a").await.unwrap(),
        locks.rwlock("b").unwrap().read().await.unwrap(),
        locks.semaphore("c", 2).unwrap().acquire().await.unwrap(),
    );
    let spared = other.lock("a").await.unwrap();
    locks.purge_namespace().await.unwrap();
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["other"]);
    for guard in [&held, &read, &permit] {
        tokio::time::timeout(Duration::from_secs(5), guard.lost())
            .await
            .expect("a holder in the purged namespace was not told");
    }
    let again = locks
        .lock_with("a", LockOptions::new().wait(Duration::ZERO))
        .await
        .unwrap();
    assert!(spared.is_held());
    drop((held, read, permit, again, spared));
}
