//! Removing a namespace's directory and everything in it.
//!
//! The directory is first renamed out of the way, to a name no namespace
//! can have (`.purge~<namespace>~…`: `~` is not allowed in namespaces),
//! and then removed: from the rename on, the namespace is empty for
//! everyone, and acquirers start a new directory, with counters that
//! start again. Holders keep their locks on files that no longer stand,
//! so their next check reports the lock lost (`TakenAway`).
//!
//! In a shared lock directory (sticky, like `/tmp`), only the user who
//! created a namespace directory (or root) may rename or remove it; for
//! anyone else, purging removes everything inside it and leaves the empty
//! directory, which holds no state.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::lockfile::is_missing;

/// How often removing the renamed directory is tried again when acquirers
/// that were already on their way add files to it.
const MAX_SWEEPS: usize = 8;

/// Removes the directory of `namespace` under the lock directory `root`.
/// A namespace without a directory has nothing to remove.
pub(crate) fn purge(root: &Path, namespace: &str) -> io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = root.join(namespace);
    let away = root.join(format!(
        ".purge~{namespace}~{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    match fs::rename(&dir, &away) {
        Ok(()) => remove_all(&away),
        Err(error) if is_missing(&error) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::PermissionDenied => empty_in_place(&dir),
        Err(error) => Err(error),
    }
}

/// `remove_dir_all`, again while someone already inside adds files.
fn remove_all(dir: &Path) -> io::Result<()> {
    let mut last = Ok(());
    for _ in 0..MAX_SWEEPS {
        last = fs::remove_dir_all(dir);
        match &last {
            Ok(()) => return Ok(()),
            Err(error) if is_missing(error) => return Ok(()),
            Err(_) => {}
        }
    }
    last
}

/// Removes everything inside `dir`, then `dir` itself if we may.
fn empty_in_place(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let removed = if entry.file_type()?.is_dir() {
            remove_all(&entry.path())
        } else {
            fs::remove_file(entry.path())
        };
        match removed {
            Err(error) if !is_missing(&error) => return Err(error),
            _ => {}
        }
    }
    match fs::remove_dir(dir) {
        Err(error) if !is_missing(&error) && error.kind() != io::ErrorKind::PermissionDenied => {
            Err(error)
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_of_the_namespace_goes_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        for dir in ["ns/k.readers", "ns/k.permits", "other"] {
            fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        for file in [
            "ns/k.lock",
            "ns/.tokens-3",
            "ns/k.permits/0",
            "other/k.lock",
        ] {
            fs::write(root.path().join(file), "x").unwrap();
        }
        purge(root.path(), "ns").unwrap();
        let left: Vec<_> = fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["other"]);
        assert!(root.path().join("other/k.lock").exists());
        purge(root.path(), "ns").unwrap();
    }

    #[test]
    fn a_directory_we_may_not_rename_is_emptied_in_place() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ns");
        fs::create_dir_all(dir.join("k.permits")).unwrap();
        fs::write(dir.join("k.lock"), "x").unwrap();
        empty_in_place(&dir).unwrap();
        assert!(!dir.exists());
    }
}
