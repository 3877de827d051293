//! Holder values in lock files: stored with the lock, shown by inspect
//! (through another backend instance, as another process would see them),
//! replaced by `set_value`, refused once the file is gone, and never seen
//! torn by a reader racing the writes.

mod common;

use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{locker, TempStore};
use lock_core::{LockError, LockOptions, LossReason, MAX_VALUE_LEN};

/// Exactly [`MAX_VALUE_LEN`] bytes, mostly two-byte characters, with a
/// newline near the end.
fn longest_value() -> String {
    let mut value = "é".repeat(MAX_VALUE_LEN / 2 - 1);
    value.push_str("\n!");
    assert_eq!(value.len(), MAX_VALUE_LEN);
    value
}

#[tokio::test]
async fn values_round_trip_through_inspect_and_set_value() {
    let dir = tempfile::tempdir().unwrap();
    let (holder, reader) = (locker(dir.path()), locker(dir.path()));
    let longest = longest_value();
    let values = [
        "",
        " leading and trailing spaces ",
        "line one\nline two\n",
        "\n",
        "ünïcödé ✓ 日本語 🦀",
        "value 3 0123456789abcdef\nnot a record line",
        &longest,
    ];
    for value in values {
        let guard = holder
            .lock_with("k", LockOptions::new().value(value))
            .await
            .unwrap();
        let seen = reader.inspect("k").await.unwrap().expect("held");
        assert_eq!(seen.value, value);
        assert_eq!(
            (seen.token, seen.owner.as_str()),
            (guard.token(), guard.owner().as_str())
        );
        for replacement in values {
            guard.set_value(replacement).await.unwrap();
            let seen = reader.inspect("k").await.unwrap().expect("held");
            assert_eq!(seen.value, replacement);
            assert_eq!(seen.token, guard.token(), "set_value changed the token");
        }
        guard.release().await.unwrap();
        assert_eq!(reader.inspect("k").await.unwrap(), None);
    }
}

#[tokio::test]
async fn set_value_on_a_removed_lock_file_is_lost_and_writes_nothing() {
    let store = TempStore::new();
    let (locks, backend) = (&store.locks, &store.backend);
    let guard = locks
        .lock_with("k", LockOptions::new().value("before"))
        .await
        .unwrap();
    let path = backend.lock_path(guard.name());
    fs::remove_file(&path).unwrap();
    let other = locks
        .try_lock("k")
        .await
        .unwrap()
        .expect("a new file is free");
    let result = guard.set_value("after").await;
    assert!(
        matches!(
            result,
            Err(LockError::Lost {
                reason: LossReason::TakenAway,
                ..
            })
        ),
        "{result:?}"
    );
    assert_eq!(guard.value(), "before");
    let seen = locks
        .inspect("k")
        .await
        .unwrap()
        .expect("held by the new holder");
    assert_eq!((seen.token, seen.value.as_str()), (other.token(), ""));
    other.release().await.unwrap();
}

/// A writer flips the value between a short and a page-crossing long one
/// as fast as it can while readers inspect: every value read is one of the
/// two, whole. (A read racing a write sees part old and part new bytes;
/// the record's checksum makes the reader read again.)
#[test]
fn readers_racing_value_changes_never_see_a_torn_value() {
    let dir = tempfile::tempdir().unwrap();
    let short = "short".to_owned();
    let long = "L".repeat(MAX_VALUE_LEN - 1) + "\n";
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let locks = locker(dir.path());
    let guard = runtime()
        .block_on(locks.lock_with("k", LockOptions::new().value(short.as_str())))
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = std::thread::spawn({
        let (stop, short, long) = (stop.clone(), short.clone(), long.clone());
        move || {
            let runtime = runtime();
            let mut writes = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let value = if writes.is_multiple_of(2) {
                    &long
                } else {
                    &short
                };
                runtime.block_on(guard.set_value(value.as_str())).unwrap();
                writes += 1;
            }
            runtime.block_on(guard.release()).unwrap();
            writes
        }
    });
    let reader = locker(dir.path());
    let (runtime, deadline) = (runtime(), Instant::now() + Duration::from_secs(2));
    let mut reads = 0u64;
    while Instant::now() < deadline {
        let seen = runtime
            .block_on(reader.inspect("k"))
            .unwrap()
            .expect("held");
        assert!(
            seen.value == short || seen.value == long,
            "a torn value of {} bytes after {reads} reads: {:?}…",
            seen.value.len(),
            &seen.value.chars().take(40).collect::<String>()
        );
        reads += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let writes = writer.join().unwrap();
    assert!(
        reads > 100 && writes > 100,
        "{reads} reads, {writes} writes"
    );
}
