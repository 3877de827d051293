//! The embedded default lock directory: one directory that every process
//! and every user of the host shares, kept across reboots.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use lock_core::LockError;

use crate::create::create_dir_with_mode;
use crate::lockfile::is_missing;

/// The default lock directory: persistent (tokens keep rising across
/// reboots) and shared by every user of the host.
pub const PERSISTENT_DIR: &str = "/var/lib/distlock";
/// Mode of a default directory created by [`default_dir`]: world-writable
/// and sticky, like `/tmp`. Every user may lock in it; none may remove or
/// rename another user's namespace directory.
pub const SHARED_DIR_MODE: u32 = 0o1777;

/// Where [`default_dir`] puts the locks, and why there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultDir {
    /// The lock directory: [`PERSISTENT_DIR`], or the fallback
    /// [`fallback_dir`].
    pub path: PathBuf,
    /// `None` when `path` is the persistent directory; otherwise why that
    /// one cannot be used (it names the directory and the problem).
    pub fallback_reason: Option<String>,
}

impl DefaultDir {
    /// Whether the locks live in the fallback directory (see
    /// [`default_dir`] for what that costs).
    pub fn is_fallback(&self) -> bool {
        self.fallback_reason.is_some()
    }

    /// Resolves the default directory among two candidates: `persistent`
    /// if it can be used, else `fallback`, each created with mode
    /// [`SHARED_DIR_MODE`] (set explicitly, whatever the umask) if
    /// missing. [`default_dir`] calls it with [`PERSISTENT_DIR`] and
    /// [`fallback_dir`].
    ///
    /// A candidate is used if it is (or, created, becomes) a directory
    /// owned by root or by the effective user, which that user may write
    /// to (an existing directory keeps its mode: an administrator may
    /// narrow it, e.g. to one group). Fails with
    /// [`LockError::InvalidConfig`] naming both directories and their
    /// problems when neither can be used.
    pub fn resolve(persistent: &Path, fallback: &Path) -> Result<Self, LockError> {
        let reason = match usable(persistent) {
            Ok(()) => {
                return Ok(Self {
                    path: persistent.to_owned(),
                    fallback_reason: None,
                })
            }
            Err(reason) => reason,
        };
        match usable(fallback) {
            Ok(()) => Ok(Self {
                path: fallback.to_owned(),
                fallback_reason: Some(reason),
            }),
            Err(second) => Err(LockError::invalid_config(format!(
                "no default lock directory: {reason}; {second}; pass a file:// URL naming a directory"
            ))),
        }
    }
}

/// The directory used when [`PERSISTENT_DIR`] cannot be: `distlock` in
/// [`std::env::temp_dir`] (usually `/tmp/distlock`). Shared by every user
/// too (as long as they agree on the temporary directory: a per-user
/// `TMPDIR` gives each user their own), but emptied at boot on many
/// systems, and with it the fencing counters: tokens then start again.
pub fn fallback_dir() -> PathBuf {
    std::env::temp_dir().join("distlock")
}

/// The embedded default lock directory, created if missing:
/// [`PERSISTENT_DIR`] (`/var/lib/distlock`), shared by every process and
/// user of the host and kept across reboots, so tokens keep rising. Where
/// it cannot be created or used (not root and it does not exist yet, a
/// read-only file system, …), [`fallback_dir`] instead, with the reason in
/// [`DefaultDir::fallback_reason`]. Never depends on the user, on
/// `XDG_RUNTIME_DIR` or on `HOME`. See [`DefaultDir::resolve`] for the
/// checks and the error when neither directory can be used.
pub fn default_dir() -> Result<DefaultDir, LockError> {
    DefaultDir::resolve(Path::new(PERSISTENT_DIR), &fallback_dir())
}

/// Creates `dir` with [`SHARED_DIR_MODE`] if missing, and checks that it
/// is a directory of root's or ours that we may write to; otherwise the
/// reason, naming `dir`.
fn usable(dir: &Path) -> Result<(), String> {
    let shown = dir.display();
    match fs::symlink_metadata(dir) {
        Err(error) if is_missing(&error) => {
            create_dir_with_mode(dir, SHARED_DIR_MODE)
                .map_err(|error| format!("{shown} cannot be created: {error}"))?;
        }
        Err(error) => return Err(format!("{shown} cannot be used: {error}")),
        Ok(_) => {}
    }
    let meta = fs::metadata(dir).map_err(|error| format!("{shown} cannot be used: {error}"))?;
    if !meta.is_dir() {
        return Err(format!("{shown} is not a directory"));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != 0 && meta.uid() != me {
        return Err(format!(
            "{shown} belongs to user id {}, neither root nor this user",
            meta.uid()
        ));
    }
    writable(dir).map_err(|error| format!("{shown} is not writable: {error}"))
}

/// Checks write and search permission on `dir` (`access` also reports a
/// read-only file system).
pub(crate) fn writable(dir: &Path) -> io::Result<()> {
    let c_path = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: `c_path` is a valid NUL-terminated string for the call's
    // duration.
    if unsafe { libc::access(c_path.as_ptr(), libc::W_OK | libc::X_OK) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(dir: &Path) -> u32 {
        fs::metadata(dir).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn the_persistent_directory_is_created_shared_and_sticky() {
        let root = tempfile::tempdir().unwrap();
        let (persistent, fallback) = (root.path().join("lib"), root.path().join("tmp"));
        let resolved = DefaultDir::resolve(&persistent, &fallback).unwrap();
        assert_eq!(resolved.path, persistent);
        assert!(!resolved.is_fallback());
        assert_eq!(mode(&persistent), SHARED_DIR_MODE);
        assert!(!fallback.exists());
        // Found again as it is.
        assert_eq!(
            DefaultDir::resolve(&persistent, &fallback).unwrap(),
            resolved
        );
    }

    #[test]
    fn the_fallback_is_used_when_the_persistent_directory_cannot_be_created() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("plain-file");
        fs::write(&file, "").unwrap();
        let fallback = root.path().join("tmp");
        for persistent in [file.join("distlock"), root.path().join("missing/distlock")] {
            let resolved = DefaultDir::resolve(&persistent, &fallback).unwrap();
            assert_eq!(resolved.path, fallback);
            let reason = resolved.fallback_reason.expect("a reason");
            assert!(
                reason.contains(&persistent.display().to_string())
                    && reason.contains("cannot be created"),
                "{reason}"
            );
            assert_eq!(mode(&fallback), SHARED_DIR_MODE);
        }
    }

    #[test]
    fn a_persistent_path_that_is_not_a_directory_falls_back() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("distlock");
        fs::write(&file, "").unwrap();
        let resolved = DefaultDir::resolve(&file, &root.path().join("tmp")).unwrap();
        let reason = resolved.fallback_reason.unwrap();
        assert!(reason.ends_with("is not a directory"), "{reason}");
    }

    #[test]
    fn an_existing_directory_keeps_its_mode() {
        let root = tempfile::tempdir().unwrap();
        let persistent = root.path().join("lib");
        fs::create_dir(&persistent).unwrap();
        fs::set_permissions(&persistent, fs::Permissions::from_mode(0o1770)).unwrap();
        let resolved = DefaultDir::resolve(&persistent, &root.path().join("tmp")).unwrap();
        assert_eq!(resolved.path, persistent);
        assert_eq!(mode(&persistent), 0o1770);
    }

    #[test]
    fn neither_directory_usable_is_an_error_naming_both() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("plain-file");
        fs::write(&file, "").unwrap();
        let (a, b) = (file.join("a"), file.join("b"));
        match DefaultDir::resolve(&a, &b) {
            Err(LockError::InvalidConfig { reason, .. }) => {
                for dir in [&a, &b] {
                    assert!(reason.contains(&dir.display().to_string()), "{reason}");
                }
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_fallback_does_not_depend_on_the_user_or_xdg_runtime_dir() {
        assert_eq!(fallback_dir(), std::env::temp_dir().join("distlock"));
        assert_eq!(Path::new(PERSISTENT_DIR), Path::new("/var/lib/distlock"));
    }
}
