//! The process-wide wake-up registry of all file backends: a release (or
//! a read that finds a lock free) wakes this process's waiters on that
//! lock file at once, whichever backend instance they wait through.

use std::path::Path;
use std::sync::OnceLock;

use lock_core::backend::WakeRegistry;

/// The registry, keyed by lock file path (see [`wake_key`]).
pub(crate) fn wakes() -> &'static WakeRegistry {
    static WAKES: OnceLock<WakeRegistry> = OnceLock::new();
    WAKES.get_or_init(WakeRegistry::new)
}

/// The registry key of a lock file.
pub(crate) fn wake_key(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}
