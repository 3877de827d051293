//! kazoo (Python's ZooKeeper client) as a peer: its `Lock` recipe told
//! to count Curator's `-lock-` nodes as contenders
//! (`extra_lock_patterns=["-lock-"]`), in a small program
//! (`python/kazoo_peer.py`) driven as a [`RecipePeer`]: for tests that a
//! kazoo service and distlock's `layout=curator` exclude each other.
//!
//! A missing Python or kazoo fails with what to install, never a silent
//! skip.

use std::process::Command;
use std::time::Duration;

use crate::find_program;
use crate::recipe_peer::RecipePeer;

/// The peer's source, written to a file the first time a peer starts.
const SOURCE: &str = include_str!("../python/kazoo_peer.py");
/// What to do when Python or kazoo is missing.
const HINT: &str = "run scripts/test.sh (it installs Debian's python3-kazoo)";

impl RecipePeer {
    /// Starts a kazoo peer connected to `connect_string` (`host:port,...`)
    /// with session timeout `session_timeout`, and waits until it reads
    /// commands. It answers `mutex`, `holding?`, `release` and `quit`.
    ///
    /// Fails naming what is missing (python3, the kazoo module) or why it
    /// did not start.
    pub async fn kazoo(connect_string: &str, session_timeout: Duration) -> Result<Self, String> {
        // Debian's python3 (where python3-kazoo installs) before any other
        // on PATH.
        let python = find_program(&["/usr/bin/python3", "python3"], HINT)?;
        let script = script()?;
        let found = Command::new(&python)
            .args(["-c", "import kazoo.recipe.lock"])
            .output()
            .map_err(|e| format!("run {}: {e}", python.display()))?;
        if !found.status.success() {
            return Err(format!("{} has no kazoo module: {HINT}", python.display()));
        }
        let mut command = Command::new(python);
        command
            .arg(script)
            .arg(connect_string)
            .arg(session_timeout.as_millis().to_string());
        Self::start(command, "the kazoo peer").await
    }
}

/// The peer program's path: the source written once per process into the
/// temp dir (a file of its own per process, so parallel binaries never
/// read a half-written one).
fn script() -> Result<std::path::PathBuf, String> {
    static WRITTEN: std::sync::OnceLock<Result<std::path::PathBuf, String>> =
        std::sync::OnceLock::new();
    WRITTEN
        .get_or_init(|| {
            let path =
                std::env::temp_dir().join(format!("distlock-kazoo-peer-{}.py", std::process::id()));
            std::fs::write(&path, SOURCE)
                .map(|()| path.clone())
                .map_err(|e| format!("write {}: {e}", path.display()))
        })
        .clone()
}
