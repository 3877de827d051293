//! Behaviour specific to the file backend: loss when the lock file goes,
//! token persistence, exclusion across processes, directory checks and the
//! key → file mapping on disk.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{open, TempStore};
use distlock_testkit::store_config::invalid_config;
use lock_core::backend::TryAcquire;
use lock_core::{LockError, LockGuard, LockOptions, Locker, LockerOptions, LossReason};
use lock_file::{FileBackend, FileConfig, UNKNOWN_OWNER};
use tokio::io::{AsyncBufReadExt, BufReader};

/// A locker on `backend`, in the default namespace.
fn locker(backend: &FileBackend) -> Locker {
    Locker::new(Arc::new(backend.clone()), LockerOptions::default())
}

fn wait(d: Duration) -> LockOptions {
    LockOptions::new().wait(d)
}

/// Takes `k` in `store`, then removes its lock file behind the guard's
/// back.
async fn lock_k_and_remove_its_file(store: &TempStore) -> LockGuard {
    let guard = store.locks.lock("k").await.unwrap();
    fs::remove_file(store.backend.lock_path(guard.name())).unwrap();
    guard
}

/// Asserts that a release reported the lock taken away.
fn assert_taken_away(released: Result<(), LockError>) {
    assert!(
        matches!(
            released,
            Err(LockError::Lost {
                reason: LossReason::TakenAway,
                ..
            })
        ),
        "{released:?}"
    );
}

#[tokio::test]
async fn removed_lock_file_makes_the_guard_report_lost() {
    let store = TempStore::checked_every(Duration::from_millis(20));
    let guard = lock_k_and_remove_its_file(&store).await;
    let reason = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("the lost signal did not fire");
    assert_eq!(reason, LossReason::TakenAway);
    assert!(!guard.is_held());
    assert_taken_away(guard.release().await);
}

#[tokio::test]
async fn replaced_lock_file_is_lost_and_the_new_holder_is_left_alone() {
    let store = TempStore::checked_every(Duration::from_millis(20));
    let new_locks = locker(&store.backend);
    let old = lock_k_and_remove_its_file(&store).await;
    let new = new_locks
        .try_lock("k")
        .await
        .unwrap()
        .expect("a fresh file is free");
    let reason = tokio::time::timeout(Duration::from_secs(2), old.lost()).await;
    assert_eq!(reason.expect("not reported lost"), LossReason::TakenAway);
    assert!(old.release().await.unwrap_err().is_lost());
    assert!(new.is_held());
    assert!(
        store.locks.try_lock("k").await.unwrap().is_none(),
        "the old release freed the new lock"
    );
    new.release().await.unwrap();
}

#[tokio::test]
async fn release_reports_lost_when_the_file_was_removed_before_any_check() {
    let store = TempStore::checked_every(Duration::from_secs(3600));
    let guard = lock_k_and_remove_its_file(&store).await;
    assert!(guard.is_held(), "no check ran yet");
    assert_taken_away(guard.release().await);
    store
        .locks
        .try_lock("k")
        .await
        .unwrap()
        .expect("free after release")
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn tokens_keep_increasing_across_backend_instances() {
    let dir = tempfile::tempdir().unwrap();
    let mut last = 0;
    for _ in 0..3 {
        let backend = open(FileConfig::new(dir.path()));
        let locks = locker(&backend);
        for _ in 0..2 {
            let guard = locks.lock("persistent").await.unwrap();
            assert!(
                guard.token().get() > last,
                "token {} after {last}",
                guard.token()
            );
            last = guard.token().get();
            guard.release().await.unwrap();
        }
        drop(locks);
        drop(backend);
    }
    assert_eq!(last, 6);
}

/// Holds `flock(LOCK_EX)` on argv[1] from another process until killed.
const HOLDER_SCRIPT: &str = r#"
import fcntl, sys, time
f = open(sys.argv[1], "a")
fcntl.flock(f, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(30)
"#;

#[tokio::test]
async fn a_lock_held_by_another_process_is_taken_soon_after_that_process_is_killed() {
    let store = TempStore::new();
    let locks = &store.locks;
    let path = store.made_lock_path("shared/job");
    let mut holder = tokio::process::Command::new("python3")
        .arg("-c")
        .arg(HOLDER_SCRIPT)
        .arg(&path)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("this test needs python3 to hold a lock from another process");
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    let said = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("the holder process did not lock in time")
        .unwrap();
    assert_eq!(said.as_deref(), Some("locked"));

    assert!(
        locks.try_lock("shared/job").await.unwrap().is_none(),
        "took a lock held by another process"
    );
    let info = locks
        .inspect("shared/job")
        .await
        .unwrap()
        .expect("held by the other process");
    assert_eq!(
        info.owner, UNKNOWN_OWNER,
        "nothing was recorded by that holder"
    );
    assert_eq!(info.ttl_left, None);

    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            let guard = locks
                .lock_with("shared/job", wait(Duration::from_secs(20)))
                .await?;
            Ok::<_, LockError>((Instant::now(), guard))
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "the waiter did not wait");

    let killed_at = Instant::now();
    holder.start_kill().unwrap(); // SIGKILL: no chance to unlock by itself
    holder.wait().await.unwrap();
    let (acquired_at, guard) = waiter.await.unwrap().unwrap();
    let freed_after = acquired_at.saturating_duration_since(killed_at);
    assert!(
        freed_after < Duration::from_secs(1),
        "taken {freed_after:?} after the kill"
    );
    assert_eq!(
        guard.token().get(),
        1,
        "the first distlock holder of this file"
    );
    guard.release().await.unwrap();
}

#[test]
fn open_rejects_a_regular_file_and_a_directory_under_one() {
    for (under_the_file, expected) in [(None, "is not a directory"), (Some("locks"), "cannot be")] {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("plain-file");
        fs::write(&file, "not a directory").unwrap();
        let dir = under_the_file.map_or_else(|| file.clone(), |name| file.join(name));
        let reason = invalid_config("open", FileBackend::open(FileConfig::new(&dir)));
        assert!(
            reason.contains(&dir.display().to_string()),
            "{dir:?}: {reason}"
        );
        assert!(reason.contains(expected), "{dir:?}: {reason}");
    }
}

#[test]
fn open_creates_a_missing_directory_private_to_the_user() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("a/b/locks");
    open(FileConfig::new(&dir));
    let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{mode:o}");
}

#[tokio::test]
async fn lock_files_are_not_writable_by_others() {
    let store = TempStore::new();
    let guard = store.locks.lock("k").await.unwrap();
    let mode = fs::metadata(store.backend.lock_path(guard.name()))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777 & !0o644, 0, "mode {mode:o}");
    guard.release().await.unwrap();
}

fn walk(dir: &Path, found: &mut BTreeSet<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, found);
        }
        found.insert(path);
    }
}

#[tokio::test]
async fn keys_with_dot_dot_stay_inside_the_namespace_directory() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("locks");
    let backend = open(FileConfig::new(&dir));
    let locks = locker(&backend).with_namespace("ns").unwrap();
    let keys = [
        "..",
        "../..",
        "a/../../etc",
        "../../../../../tmp/escape",
        ".",
        ".hidden",
        "a/..",
    ];
    let mut held = Vec::new();
    for key in keys {
        held.push(locks.try_lock(key).await.unwrap().expect("distinct keys"));
    }
    let mut found = BTreeSet::new();
    walk(root.path(), &mut found);
    let ns_dir = dir.join("ns");
    // Beside the lock files, the namespace's token counters.
    let counter = |p: &&PathBuf| {
        p.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(".tokens-")
    };
    let files: Vec<_> = found
        .iter()
        .filter(|p| p.is_file() && !counter(p))
        .collect();
    assert_eq!(files.len(), keys.len(), "{found:?}");
    for file in &files {
        assert_eq!(file.parent(), Some(ns_dir.as_path()), "{file:?}");
        let name = file.file_name().unwrap().to_str().unwrap();
        assert!(!name.starts_with('.') && name.ends_with(".lock"), "{name}");
    }
    let counters = found.iter().filter(counter).count();
    assert_eq!(
        found.len(),
        keys.len() + counters + 2,
        "only locks/, locks/ns/, the counters and the files: {found:?}"
    );
    for guard in held {
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn a_release_wakes_waiters_of_another_backend_instance() {
    let store = TempStore::new();
    let waiter_backend = open(FileConfig::new(store.dir.path()));
    let locks = &store.locks;

    let guard = locks.lock("k").await.unwrap();
    let mut woken = waiter_backend.watch_releases(guard.name()).await.unwrap();
    guard.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), woken.woken())
        .await
        .expect("release did not wake the other backend's waiter");

    let guard = locks.lock("k").await.unwrap();
    let mut woken = waiter_backend.watch_releases(guard.name()).await.unwrap();
    drop(guard);
    tokio::time::timeout(Duration::from_secs(2), woken.woken())
        .await
        .expect("dropping the guard did not wake the other backend's waiter");
}

#[test]
fn a_guard_dropped_outside_any_runtime_frees_the_lock_at_once() {
    let store = TempStore::new();
    let locks = &store.locks;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let guard = runtime.block_on(locks.lock("k")).unwrap();
    drop(runtime);
    drop(guard);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let again = runtime.block_on(locks.try_lock("k")).unwrap();
    assert!(again.is_some(), "the dropped guard still holds the lock");
}

#[tokio::test]
async fn a_lock_file_without_a_token_is_an_error_not_a_reset() {
    let store = TempStore::new();
    let locks = &store.locks;
    let path = store.made_lock_path("k");
    fs::write(&path, "not a token\n").unwrap();
    match locks.try_lock("k").await {
        Err(LockError::Backend { message, .. }) => {
            assert!(message.contains(&path.display().to_string()), "{message}");
        }
        other => panic!("expected a Backend error, got {other:?}"),
    }
    fs::remove_file(&path).unwrap();
    let guard = locks.try_lock("k").await.unwrap().expect("free once reset");
    assert_eq!(guard.token().get(), 1);
    guard.release().await.unwrap();
}
