//! The modes of what the store creates, under a restrictive umask (this
//! test binary sets `umask 077` for its whole process): in a lock
//! directory others may write to, every file and directory is made usable
//! by them whatever the umask; in a private one, the umask decides as
//! before. And the default directory is created world-writable and sticky.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Once};

use lock_core::{Locker, LockerOptions};
use lock_file::{DefaultDir, FileBackend, FileConfig, SHARED_DIR_MODE};

/// `umask 077` for the process, set once before any test creates a file.
fn restrictive_umask() {
    static SET: Once = Once::new();
    // SAFETY: umask has no preconditions; every test of this binary wants
    // the same mask.
    SET.call_once(|| unsafe {
        libc::umask(0o077);
    });
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Holds a lock, two read locks, a permit and a waiting writer's mark in
/// the lock directory `root` (mode `root_mode`), and returns the mode of
/// every entry under it meanwhile, by name.
async fn modes_while_held(root_mode: u32) -> BTreeMap<String, u32> {
    restrictive_umask();
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(root_mode)).unwrap();
    let backend = FileBackend::open(FileConfig::new(dir.path())).unwrap();
    let locks = Locker::new(Arc::new(backend), LockerOptions::default());
    let plain = locks.lock("plain").await.unwrap();
    let cfg = locks.rwlock("cfg").unwrap();
    let readers = (cfg.read().await.unwrap(), cfg.read().await.unwrap());
    let waiting_writer = {
        let cfg = locks.rwlock("cfg").unwrap();
        tokio::spawn(async move { cfg.write().await.unwrap().release().await })
    };
    let gate = dir.path().join("default/cfg.gate");
    while !gate.exists() {
        tokio::task::yield_now().await;
    }
    let permit = locks.semaphore("pool", 2).unwrap().acquire().await.unwrap();
    let mut modes = BTreeMap::new();
    modes.insert("default".to_owned(), mode(&dir.path().join("default")));
    for entry in fs::read_dir(dir.path().join("default")).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        let name = if name.starts_with(".tokens-") {
            ".tokens-N".to_owned()
        } else {
            name
        };
        modes.insert(name, mode(&entry.path()));
    }
    drop((plain, permit));
    drop(readers);
    waiting_writer.await.unwrap().unwrap();
    modes
}

fn expected(dir: u32, file: u32) -> BTreeMap<String, u32> {
    [
        ("default", dir),
        (".tokens-N", file),
        ("plain.lock", file),
        ("cfg.lock", file),
        ("cfg.gate", file),
        ("cfg.reader-0", file),
        ("cfg.reader-1", file),
        ("pool.semaphore", file),
        ("pool.permit-0", file),
        ("pool.permit-1", file),
    ]
    .into_iter()
    .map(|(name, mode)| (name.to_owned(), mode))
    .collect()
}

#[tokio::test]
async fn in_a_directory_everyone_may_write_to_everything_is_usable_by_everyone() {
    assert_eq!(modes_while_held(0o1777).await, expected(0o777, 0o666));
}

#[tokio::test]
async fn in_a_directory_the_group_may_write_to_everything_is_usable_by_the_group() {
    assert_eq!(modes_while_held(0o2770).await, expected(0o2770, 0o660));
}

#[tokio::test]
async fn in_a_private_directory_the_umask_decides() {
    assert_eq!(modes_while_held(0o700).await, expected(0o700, 0o600));
}

#[test]
fn the_default_directory_is_created_world_writable_and_sticky() {
    restrictive_umask();
    let root = tempfile::tempdir().unwrap();
    let persistent = root.path().join("lib/distlock");
    fs::create_dir(root.path().join("lib")).unwrap();
    let resolved = DefaultDir::resolve(&persistent, &root.path().join("tmp")).unwrap();
    assert_eq!(resolved.path, persistent);
    assert_eq!(mode(&persistent), SHARED_DIR_MODE);
    assert_eq!(SHARED_DIR_MODE, 0o1777);
}
