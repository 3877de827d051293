//! The file store's name mapping, checked on disk: for generated batches
//! of keys (any printable characters, up to past the hashing threshold)
//! locked at once in a fresh directory, every lock file is where
//! `FileBackend::lock_path` says, inside the lock directory, and there
//! are exactly as many lock files as distinct valid keys — no key escapes
//! the directory and no two keys share a file.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use lock_core::{LockError, Locker, LockerOptions};
use lock_file::{FileBackend, FileConfig};
use proptest::prelude::*;

/// Cases (batches of keys) the property runs.
const CASES: u32 = 1000;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the property")
    })
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the lock directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn locked_keys_get_one_file_each_inside_the_directory(
        keys in prop::collection::vec("\\PC{1,300}", 1..8),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let backend = FileBackend::open(FileConfig::new(dir.path())).unwrap();
        let root = dir.path().canonicalize().unwrap();
        let locker = Locker::new(Arc::new(backend.clone()), LockerOptions::default());
        let mut guards = Vec::new();
        let mut valid = BTreeSet::new();
        runtime().block_on(async {
            for key in &keys {
                match locker.try_lock(key).await {
                    Ok(Some(guard)) => {
                        valid.insert(key.clone());
                        guards.push(guard);
                    }
                    // The same key twice in the batch.
                    Ok(None) => assert!(valid.contains(key), "{key:?} held by nobody else"),
                    Err(LockError::InvalidKey { .. }) => {}
                    Err(e) => panic!("{key:?}: {e}"),
                }
            }
        });
        for key in &valid {
            let path = backend.lock_path(&locker.name(key).unwrap());
            prop_assert!(path.starts_with(&root), "{key:?} -> {}", path.display());
            prop_assert!(path.is_file(), "{key:?} -> {} missing", path.display());
        }
        let lock_files: Vec<PathBuf> = files_under(&root)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "lock"))
            .collect();
        prop_assert_eq!(lock_files.len(), valid.len(), "{:?}", lock_files);
        runtime().block_on(async {
            for guard in guards {
                guard.release().await.unwrap();
            }
        });
    }
}
