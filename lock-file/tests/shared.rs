//! Read locks and permits held by another process (this test binary run
//! again as a helper): seen from here while it lives, and given back by
//! the kernel when it is killed.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::locker;
use distlock_testkit::this_binary_running;
use lock_core::{HoldKind, LockOptions};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Set (to a lock directory) only in the helper process.
const HELPER_DIR: &str = "LOCK_FILE_TEST_SHARED_DIR";
/// What the helper prints once it holds a read lock of `cfg` and one of
/// the two permits of `pool`.
const HOLDING: &str = "HELPER-HOLDING";
const SLACK: Duration = Duration::from_secs(5);

/// Not a test: the holder run in a child process (this binary run with
/// `--include-ignored --exact`), so a plain run lists it as ignored rather
/// than as a pass. Only does something when run as the helper: takes a
/// read lock of `cfg` and a permit of `pool` (limit 2), says so, and holds
/// them until killed.
#[tokio::test]
#[ignore = "entry point for child processes"]
async fn helper_shared_holder_process() {
    let Some(dir) = std::env::var_os(HELPER_DIR) else {
        return;
    };
    let locks = locker(Path::new(&dir));
    let read = locks.rwlock("cfg").unwrap().read().await.unwrap();
    let permit = locks.semaphore("pool", 2).unwrap().acquire().await.unwrap();
    println!("{HOLDING} {} {}", read.token().get(), permit.token().get());
    std::future::pending::<()>().await;
}

#[tokio::test]
async fn a_killed_processs_read_lock_and_permit_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let command = this_binary_running("helper_shared_holder_process");
    let mut child = tokio::process::Command::from(command)
        .env(HELPER_DIR, dir.path())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run this test binary as a helper");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (read_token, permit_token) = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some((_, tokens)) = line.split_once(HOLDING) {
                let mut tokens = tokens.split_whitespace().map(|t| t.parse::<u64>().unwrap());
                return (tokens.next().unwrap(), tokens.next().unwrap());
            }
        }
        panic!("the helper ended without holding");
    })
    .await
    .expect("the helper did not take its holds in time");

    let locks = locker(dir.path());
    let (cfg, pool) = (
        locks.rwlock("cfg").unwrap(),
        locks.semaphore("pool", 2).unwrap(),
    );
    // Seen from here: the other process's reader and permit.
    let readers = cfg.holders().await.unwrap();
    assert_eq!(readers.len(), 1, "{readers:?}");
    assert_eq!(
        (readers[0].token.get(), readers[0].kind),
        (read_token, HoldKind::Shared)
    );
    let permits = pool.holders().await.unwrap();
    assert_eq!(permits.len(), 1, "{permits:?}");
    assert_eq!(
        (permits[0].token.get(), permits[0].kind),
        (permit_token, HoldKind::Permit { limit: 2 })
    );
    assert!(
        cfg.try_write().await.unwrap().is_none(),
        "a writer beside a reader"
    );
    let second = pool
        .try_acquire()
        .await
        .unwrap()
        .expect("the second permit");
    assert!(
        pool.try_acquire().await.unwrap().is_none(),
        "a third permit of two"
    );
    let mismatch = locks.semaphore("pool", 3).unwrap().try_acquire().await;
    assert!(
        matches!(
            mismatch,
            Err(lock_core::LockError::LimitMismatch {
                stored: 2,
                asked: 3,
                ..
            })
        ),
        "{mismatch:?}"
    );

    // Killed: the kernel lets go of its locks; its reader file is stale.
    child.kill().await.unwrap();
    let writer = cfg
        .write_with(LockOptions::new().wait(SLACK))
        .await
        .expect("the writer after the reader was killed");
    assert!(writer.token().get() > read_token);
    writer.release().await.unwrap();
    assert!(
        cfg.holders().await.unwrap().is_empty(),
        "the dead reader is still listed"
    );
    let permit = pool
        .acquire_with(LockOptions::new().wait(SLACK))
        .await
        .expect("the dead holder's permit");
    assert!(permit.token() > second.token());
    assert_eq!(pool.holders().await.unwrap().len(), 2);
    drop((permit, second));
}

#[tokio::test]
async fn released_readers_leave_no_files_behind() {
    let dir = tempfile::tempdir().unwrap();
    let locks = locker(dir.path());
    let cfg = locks.rwlock("cfg").unwrap();
    let (a, b) = (cfg.read().await.unwrap(), cfg.read().await.unwrap());
    a.set_value("mine").await.unwrap();
    let values: Vec<_> = cfg
        .holders()
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.value)
        .collect();
    assert_eq!(values, ["mine", ""], "each reader's own value");
    a.release().await.unwrap();
    b.release().await.unwrap();
    // Only the namespace's token counter stays: no lock file, gate or
    // readers' directory.
    let left: Vec<_> = std::fs::read_dir(dir.path().join("default"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        left.len() == 1 && left[0].starts_with(".tokens-"),
        "{left:?}"
    );
}
