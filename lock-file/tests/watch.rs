//! Watches of lock files: acquisitions, value changes and releases in this
//! process and in others (this test binary run again as a helper holder),
//! a holder killed while holding, and a dropped watch that lets go of its
//! inotify watch.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{locker, TempStore};
use distlock_testkit::this_binary_running;
use distlock_testkit::wait::eventually;
use lock_core::{HolderWatch, LockInfo, LockOptions, Locker};
use lock_file::SETTLE;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

/// How long any single state may take to show up in a watch.
const SLACK: Duration = Duration::from_secs(5);
/// Set (to a lock directory) only in the helper process.
const HELPER_DIR: &str = "LOCK_FILE_TEST_HOLDER_DIR";
const HELPER_KEY: &str = "jobs/shared";
const HELPER_VALUE: &str = "held by another process\nline two";
/// What the helper prints, before its token, once it holds the lock.
const LOCKED: &str = "HELPER-LOCKED";

/// A watch on `key`, which it reports free.
async fn watch_free(locks: &Locker, key: &str) -> HolderWatch {
    let mut watch = locks.watch(key).unwrap();
    assert_eq!(next(&mut watch).await, None);
    watch
}

async fn next(watch: &mut HolderWatch) -> Option<LockInfo> {
    tokio::time::timeout(SLACK, watch.changed())
        .await
        .unwrap_or_else(|_| panic!("the watch reported nothing for {SLACK:?}"))
}

#[tokio::test]
async fn watch_reports_acquire_value_change_release_and_drop() {
    let dir = tempfile::tempdir().unwrap();
    let (holder, watcher) = (locker(dir.path()), locker(dir.path()));
    let mut watch = watcher.watch("k").unwrap();
    assert_eq!(next(&mut watch).await, None, "free before any lock file");

    let guard = holder
        .lock_with("k", LockOptions::new().value("first"))
        .await
        .unwrap();
    let held = next(&mut watch).await.expect("the acquisition");
    assert_eq!(
        (held.token, held.owner.as_str(), held.value.as_str()),
        (guard.token(), guard.owner().as_str(), "first")
    );
    guard.set_value("second\nvalue").await.unwrap();
    let changed = next(&mut watch).await.expect("the value change");
    assert_eq!(
        (changed.token, changed.value.as_str()),
        (guard.token(), "second\nvalue")
    );
    guard.release().await.unwrap();
    assert_eq!(next(&mut watch).await, None, "the release");

    let guard = holder.lock("k").await.unwrap();
    let held = next(&mut watch).await.expect("the second acquisition");
    assert_eq!((held.token, held.value.as_str()), (guard.token(), ""));
    drop(guard);
    assert_eq!(next(&mut watch).await, None, "the dropped guard");
}

/// Not a test: the holder run in a child process ([`spawn_holder`] runs
/// this binary with `--include-ignored --exact`), so a plain run lists it
/// as ignored rather than as a pass. Only does something when run as the
/// helper: takes `HELPER_KEY` with `HELPER_VALUE`, prints
/// `HELPER-LOCKED <token>`, then releases when told `release` on stdin
/// (and says `released`), or holds until killed.
#[tokio::test]
#[ignore = "entry point for child processes"]
async fn helper_holder_process() {
    let Some(dir) = std::env::var_os(HELPER_DIR) else {
        return;
    };
    let guard = locker(Path::new(&dir))
        .lock_with(HELPER_KEY, LockOptions::new().value(HELPER_VALUE))
        .await
        .unwrap();
    // libtest has printed `test helper_holder_process ... ` on this line.
    println!("{LOCKED} {}", guard.token().get());
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await
    .unwrap()
    .unwrap();
    if line.trim() == "release" {
        guard.release().await.unwrap();
        println!("released");
    } else {
        std::future::pending::<()>().await;
    }
}

/// This test binary, run as [`helper_holder_process`] on `dir`, once it
/// holds the lock: the child and its token.
async fn spawn_holder(dir: &Path) -> (Child, Lines<BufReader<ChildStdout>>, u64) {
    let mut child = tokio::process::Command::from(this_binary_running("helper_holder_process"))
        .env(HELPER_DIR, dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run this test binary as a helper");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let token = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some((_, token)) = line.split_once(LOCKED) {
                return token.trim().parse::<u64>().unwrap();
            }
        }
        panic!("the helper ended without locking");
    })
    .await
    .expect("the helper did not lock in time");
    (child, lines, token)
}

#[tokio::test]
async fn watch_sees_a_holder_in_another_process_take_and_release() {
    let dir = tempfile::tempdir().unwrap();
    let locks = locker(dir.path());
    let mut watch = watch_free(&locks, HELPER_KEY).await;

    let (mut child, mut lines, token) = spawn_holder(dir.path()).await;
    let held = next(&mut watch)
        .await
        .expect("the other process's acquisition");
    assert_eq!(
        (held.token.get(), held.value.as_str()),
        (token, HELPER_VALUE)
    );
    let inspected = locks.inspect(HELPER_KEY).await.unwrap().expect("held");
    assert_eq!(inspected, held, "inspect and watch disagree");

    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"release\n").await.unwrap();
    assert_eq!(next(&mut watch).await, None, "the other process's release");
    let said = tokio::time::timeout(SLACK, lines.next_line())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(said.as_deref(), Some("released"));
    assert!(child.wait().await.unwrap().success());
}

/// The kernel closes a killed holder's lock file and drops its flock; the
/// close reaches the watch a moment before the unlock, and the watch's
/// re-reads after it ([`SETTLE`], 1 ms to 1 s) catch the unlock.
#[tokio::test]
async fn watch_sees_a_killed_holder_as_free() {
    let dir = tempfile::tempdir().unwrap();
    let locks = locker(dir.path());
    let mut watch = watch_free(&locks, HELPER_KEY).await;
    let (mut child, _lines, token) = spawn_holder(dir.path()).await;
    assert_eq!(next(&mut watch).await.map(|h| h.token.get()), Some(token));

    let killed_at = Instant::now();
    child.start_kill().unwrap(); // SIGKILL: no chance to unlock by itself
    assert_eq!(next(&mut watch).await, None, "the killed holder");
    let seen_after = killed_at.elapsed();
    child.wait().await.unwrap();
    let bound = SETTLE.iter().sum::<Duration>() + Duration::from_millis(500);
    assert!(
        seen_after < bound,
        "seen free {seen_after:?} after the kill"
    );
    let guard = locks.try_lock(HELPER_KEY).await.unwrap().expect("free");
    assert_eq!(guard.token().get(), token + 1);
}

/// inotify watches on the directory with inode `ino`, over all inotify
/// descriptors of this process (from `/proc/self/fdinfo`).
fn inotify_watches_on(dir: &Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    let ino = format!("ino:{:x} ", std::fs::metadata(dir).unwrap().ino());
    let mut count = 0;
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let is_inotify = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.as_os_str() == "anon_inode:inotify");
        let fd = entry.file_name();
        let info = std::fs::read_to_string(Path::new("/proc/self/fdinfo").join(&fd));
        if let (true, Ok(info)) = (is_inotify, info) {
            count += info
                .lines()
                .filter(|line| line.starts_with("inotify ") && line.contains(&ino))
                .count();
        }
    }
    count
}

#[tokio::test]
async fn dropping_the_watch_removes_its_inotify_watch() {
    let store = TempStore::new();
    let (locks, lock_path) = (&store.locks, store.lock_path("k"));
    let ns_dir = lock_path.parent().unwrap();
    let watch = watch_free(locks, "k").await;
    assert_eq!(inotify_watches_on(ns_dir), 1, "the watch is set up");
    let mut second = locks.watch("k").unwrap();
    assert_eq!(next(&mut second).await, None);
    assert_eq!(inotify_watches_on(ns_dir), 2, "one per watch");
    drop(watch);
    drop(second);
    eventually(Duration::from_secs(5), "the watchers to go", || async {
        inotify_watches_on(ns_dir) == 0
    })
    .await
    .unwrap();
}

/// The namespace directory removed under a watch: the watch sets itself
/// up again on the directory as created again, and sees the next holder.
#[tokio::test]
async fn a_watch_follows_its_directory_being_removed_and_created_again() {
    let store = TempStore::new();
    let (locks, lock_path) = (&store.locks, store.lock_path("k"));
    let ns_dir = lock_path.parent().unwrap().to_path_buf();
    let mut watch = watch_free(locks, "k").await;
    // Drive the watch in a task, so it can set itself up again unasked.
    let (states, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move { while states.send(watch.changed().await).is_ok() {} });
    assert_eq!(inotify_watches_on(&ns_dir), 1);
    std::fs::remove_dir(&ns_dir).unwrap();
    eventually(
        Duration::from_secs(5),
        "the watch on the new directory",
        || async { ns_dir.is_dir() && inotify_watches_on(&ns_dir) == 1 },
    )
    .await
    .unwrap();
    let guard = locks.lock("k").await.unwrap();
    let held = tokio::time::timeout(SLACK, seen.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(held.map(|h| h.token), Some(guard.token()));
    driver.abort();
}
