//! Finding server programs, and overrides pointing at running servers.
//!
//! A missing server must make a test fail with a message saying what to
//! install, never pass silently.

use std::env;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Points the Redis tests at a running server instead of spawning one.
pub const REDIS_URL_VAR: &str = "DISTLOCK_TEST_REDIS_URL";
/// Points the etcd tests at a running server instead of spawning one.
pub const ETCD_URL_VAR: &str = "DISTLOCK_TEST_ETCD_URL";
/// Points the ZooKeeper tests at a running server instead of spawning one.
pub const ZK_URL_VAR: &str = "DISTLOCK_TEST_ZK_URL";
/// Points the PostgreSQL tests at a running server instead of spawning one.
pub const PG_URL_VAR: &str = "DISTLOCK_TEST_PG_URL";

/// Finds the first of `candidates` that is an executable file.
///
/// A candidate containing a `/` is taken as a path and checked as is;
/// a bare name is looked up in each dir of `PATH`. When none is found the
/// error names the first candidate, everything searched, and `what`, a
/// hint on what to do (see [`install_hint`]), e.g. "redis-server not
/// found: run scripts/test.sh (it installs Debian's redis-server) or set
/// DISTLOCK_TEST_REDIS_URL to a running server".
pub fn find_program(candidates: &[&str], what: &str) -> Result<PathBuf, String> {
    let path_dirs: Vec<PathBuf> = env::var_os("PATH")
        .map(|path| env::split_paths(&path).collect())
        .unwrap_or_default();
    candidates
        .iter()
        .find_map(|candidate| locate(candidate, &path_dirs))
        .ok_or_else(|| {
            let name = candidates.first().copied().unwrap_or("program");
            format!(
                "{name} not found: {what} (looked for {candidates:?} in PATH {:?})",
                env::var("PATH").unwrap_or_default()
            )
        })
}

/// The usual hint for a server missing from the machine: install the
/// Debian `package` with `scripts/test.sh`, or set `env_var` to a server.
pub fn install_hint(package: &str, env_var: &str) -> String {
    format!(
        "run scripts/test.sh (it installs Debian's {package}) \
         or set {env_var} to a running server"
    )
}

/// The value of the environment variable `var` (e.g. [`REDIS_URL_VAR`])
/// when set and not blank, trimmed.
pub fn env_override(var: &str) -> Option<String> {
    let value = env::var(var).ok()?;
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

/// `candidate` as a path if it contains `/`, else the first executable
/// of that name in `path_dirs`.
fn locate(candidate: &str, path_dirs: &[PathBuf]) -> Option<PathBuf> {
    if candidate.contains('/') {
        let path = PathBuf::from(candidate);
        return is_executable(&path).then_some(path);
    }
    path_dirs
        .iter()
        .map(|dir| dir.join(candidate))
        .find(|path| is_executable(path))
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
