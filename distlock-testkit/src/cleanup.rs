//! Last-resort cleanup when the test process exits normally.
//!
//! A server kept in a `static` (see [`crate::shared_server`]) is
//! never dropped, so neither its process group nor its temp dir would be
//! cleaned up. The parent-death signal (see [`crate::spawn_child`])
//! kills the server's main process, but not grandchildren a wrapper script
//! may have forked, and it leaves the data dir behind. So every server is
//! recorded here, and an `atexit` handler kills the recorded process groups
//! and removes the recorded dirs when the test binary exits.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, Once, OnceLock, TryLockError};

/// What to clean up for one server.
#[derive(Debug, Default)]
struct Entry {
    /// Process group of the running child, if one runs.
    group: Option<libc::pid_t>,
    /// The server's temp dir.
    dir: Option<PathBuf>,
}

fn registry() -> &'static Mutex<HashMap<u64, Entry>> {
    static REGISTRY: OnceLock<Mutex<HashMap<u64, Entry>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// Runs `f` on the entry of server `id`, creating it if needed.
fn with_entry(id: u64, f: impl FnOnce(&mut Entry)) {
    install_exit_hook();
    let mut map = registry().lock().unwrap_or_else(|e| e.into_inner());
    f(map.entry(id).or_default());
}

/// Records the temp dir of server `id`.
pub(crate) fn track_dir(id: u64, dir: PathBuf) {
    with_entry(id, |entry| entry.dir = Some(dir));
}

/// Records (or clears, with `None`) the process group of server `id`.
pub(crate) fn track_group(id: u64, group: Option<u32>) {
    with_entry(id, |entry| entry.group = group.map(|g| g as libc::pid_t));
}

/// Forgets server `id`: its owner cleaned up by itself.
pub(crate) fn forget(id: u64) {
    let mut map = registry().lock().unwrap_or_else(|e| e.into_inner());
    map.remove(&id);
}

fn install_exit_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        // SAFETY: registering a plain `extern "C" fn()` has no
        // preconditions. A failure (non-zero) only loses the cleanup.
        unsafe {
            libc::atexit(clean_up_at_exit);
        }
    });
}

/// Kills every recorded process group, then removes every recorded dir.
extern "C" fn clean_up_at_exit() {
    // Never block at exit: if another thread holds the lock, skip.
    let map = match registry().try_lock() {
        Ok(map) => map,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return,
    };
    for entry in map.values() {
        if let Some(group) = entry.group {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe {
                libc::kill(-group, libc::SIGKILL);
            }
        }
    }
    for dir in map.values().filter_map(|entry| entry.dir.as_ref()) {
        let _ = std::fs::remove_dir_all(dir);
    }
}
