//! file: each kind of failure as the command reports it.

use super::*;
use std::os::unix::fs::{chown, PermissionsExt};
use std::os::unix::process::CommandExt;

/// The user the `distlock` under test runs as: `nobody` when the test
/// runs as root (root may write anywhere), else the test's own user.
fn as_unprivileged(mut command: Command) -> Command {
    if running_as_root() {
        command.uid(NOBODY).gid(NOBODY);
    }
    command
}

const NOBODY: u32 = 65534;

fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn status(dir: &std::path::Path) -> Command {
    let url = format!("file://{}", dir.display());
    as_unprivileged(distlock_at(&url, &["status", "k"]))
}

/// `status` at the lock directory `dir`, run as [`as_unprivileged`],
/// is denied: exit 77, the line naming `names`, `cause` and `hint`.
fn assert_status_denied(dir: &std::path::Path, names: &str, cause: &str, hint: &str) {
    let expected = Expected {
        code: 77,
        names,
        cause,
        hint,
    };
    assert_fails(status(dir), expected, None);
}

/// A directory the test's user may traverse, for the lock directories.
fn parent() -> tempfile::TempDir {
    let parent = tempfile::tempdir().unwrap();
    std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    parent
}

#[test]
fn a_read_only_lock_directory() {
    let parent = parent();
    let dir = parent.path().join("read-only");
    std::fs::create_dir(&dir).unwrap();
    if running_as_root() {
        chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o500)).unwrap();
    let shown = dir.display().to_string();
    assert_status_denied(
        &dir,
        &format!("lock directory `{shown}`"),
        "is not writable: permission denied",
        "give it write access (chmod u+w), or use a lock directory of its own",
    );
}

#[test]
fn a_lock_directory_of_another_user() {
    // Run as root: a directory of root's, used by `nobody`; otherwise
    // the root directory, which belongs to root.
    let parent = parent();
    let dir = if running_as_root() {
        let dir = parent.path().join("roots");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    } else {
        std::path::PathBuf::from("/")
    };
    let shown = dir.display().to_string();
    assert_status_denied(
        &dir,
        &format!("`{shown}` belongs to uid 0"),
        "permission denied",
        "run as that user, or give uid",
    );
}
