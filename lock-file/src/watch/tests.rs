//! Tests of the watch: which events count, the wait for a new holder's
//! record, and the polling fallback.

use super::*;
use notify::event::{CreateKind, DataChange, RemoveKind};

#[test]
fn only_changes_to_the_lock_file_or_its_directory_count() {
    let (dir, path) = (Path::new("/l/ns"), Path::new("/l/ns/k.lock"));
    let on = |kind: EventKind, p: &Path| relevance(&Event::new(kind).add_path(p.into()), path, dir);
    let write = EventKind::Modify(ModifyKind::Data(DataChange::Any));
    assert_eq!(on(write, path), Relevance::Holder);
    assert_eq!(on(write, Path::new("/l/ns/other.lock")), Relevance::None);
    let close = |mode| EventKind::Access(AccessKind::Close(mode));
    assert_eq!(on(close(AccessMode::Write), path), Relevance::Closed);
    assert_eq!(on(close(AccessMode::Read), path), Relevance::None);
    assert_eq!(
        on(EventKind::Access(AccessKind::Open(AccessMode::Any)), path),
        Relevance::None
    );
    assert_eq!(
        on(EventKind::Create(CreateKind::File), path),
        Relevance::Holder
    );
    assert_eq!(
        on(EventKind::Remove(RemoveKind::File), path),
        Relevance::Holder
    );
    assert_eq!(
        on(EventKind::Remove(RemoveKind::Folder), dir),
        Relevance::Rearm
    );
    let rescan = Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan);
    assert_eq!(relevance(&rescan, path, dir), Relevance::Rearm);
}

/// A locker on `dir` in namespace `ns`, a watch of its lock `k` (by
/// events, or `polling`), and the lock file's path.
fn watched_lock(dir: &Path, polling: bool) -> (lock_core::Locker, FileWatch, PathBuf) {
    let config = crate::FileConfig::new(dir);
    let backend = crate::FileBackend::open(config.clone()).unwrap();
    let core = FileCore::open(config).unwrap();
    let name = lock_core::LockName::parse("ns", "k").unwrap();
    let path = backend.lock_path(&name);
    let locks = lock_core::Locker::new(Arc::new(backend), Default::default())
        .with_namespace("ns")
        .unwrap();
    let watch = if polling {
        FileWatch::polling(core, path.clone())
    } else {
        FileWatch::new(core, path.clone())
    };
    (locks, watch, path)
}

/// The next state `watch` reads after a change, within `within`.
async fn next_state(watch: &mut FileWatch, within: Duration) -> Option<LockInfo> {
    tokio::time::timeout(within, async {
        watch.next_change().await.unwrap();
        watch.read().await.unwrap()
    })
    .await
    .expect("no change seen in time")
}

/// A read between a new holder's flock and its record write finds the
/// record of the holder before: the watch waits for the new record
/// instead of reporting the old holder again.
#[tokio::test]
async fn a_holder_seen_to_go_is_not_reported_again_while_the_next_one_writes() {
    use std::os::unix::fs::{FileExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let (locks, mut watch, path) = watched_lock(dir.path(), false);
    assert_eq!(watch.read().await.unwrap(), None);
    let guard = locks.lock("k").await.unwrap();
    let first = guard.token();
    let within = Duration::from_secs(5);
    assert_eq!(
        next_state(&mut watch, within).await.map(|s| s.token),
        Some(first)
    );
    guard.release().await.unwrap();
    assert_eq!(next_state(&mut watch, within).await, None);

    // A slow acquirer: the flock now (on a new file: the release removed
    // the old one), its record 30 ms later.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .unwrap();
    // SAFETY: the descriptor is open for the call.
    assert_eq!(
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) },
        0
    );
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        let record = crate::record::encode(first.get() + 1, "slow/1/u", "", 0);
        file.write_all_at(&record, 0).unwrap();
        file
    });
    // Meanwhile an event makes the watch read.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let next = next_state(&mut watch, within).await.expect("held");
    assert_eq!(
        (next.token.get(), next.owner.as_str()),
        (first.get() + 1, "slow/1/u")
    );
    drop(writer.join().unwrap());
}

/// Where no native watcher can be had: acquisitions and value changes
/// are seen by the `PollWatcher`, a release by reading the held lock
/// again every [`WATCH_POLL_INTERVAL`].
#[tokio::test]
async fn the_polling_fallback_sees_acquire_value_change_and_release() {
    let dir = tempfile::tempdir().unwrap();
    let (locks, mut watch, _) = watched_lock(dir.path(), true);
    assert_eq!(watch.read().await.unwrap(), None);
    assert!(!watch.sees_closes);
    let within = WATCH_POLL_INTERVAL * 20;

    let guard = locks
        .lock_with("k", lock_core::LockOptions::new().value("a"))
        .await
        .unwrap();
    let mut state = next_state(&mut watch, within).await;
    while state.is_none() {
        state = next_state(&mut watch, within).await;
    }
    assert_eq!(
        state.map(|s| (s.token, s.value)),
        Some((guard.token(), "a".into()))
    );
    guard.set_value("b").await.unwrap();
    loop {
        let state = next_state(&mut watch, within).await.expect("still held");
        if state.value == "b" {
            break;
        }
    }
    guard.release().await.unwrap();
    let released_at = std::time::Instant::now();
    while next_state(&mut watch, within).await.is_some() {}
    assert!(released_at.elapsed() < WATCH_POLL_INTERVAL * 10);
}
