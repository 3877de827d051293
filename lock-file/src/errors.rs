//! File system errors → [`LockError`], in one place: a path this user may
//! not use is [`LockError::PermissionDenied`] (naming the path, its owner
//! and this user), anything else [`LockError::Backend`]; the cause in
//! plain words, without the OS error number.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use lock_core::backend::diagnose::io_words;
use lock_core::LockError;

/// The error for `what` (`cannot lock`, naming the action) failing on
/// `path` with `error`.
pub(crate) fn io_error(what: &str, path: &Path, error: io::Error) -> LockError {
    let message = format!("{what} `{}`: {}", path.display(), io_words(&error));
    if is_denied(&error) {
        LockError::permission_denied(format!("{message} ({})", who_may(path)), error)
    } else {
        LockError::backend(message, error)
    }
}

/// The error for the lock directory `dir`, which `problem` (`is not
/// writable`) because of `error`: [`LockError::PermissionDenied`] when the
/// file system denied it, [`LockError::InvalidConfig`] otherwise (the URL
/// must name another directory).
pub(crate) fn dir_error(dir: &Path, problem: &str, error: &io::Error) -> LockError {
    let message = format!(
        "lock directory `{}` {problem}: {}",
        dir.display(),
        io_words(error)
    );
    if is_denied(error) {
        LockError::PermissionDenied {
            message: format!("{message} ({})", who_may(dir)),
            source: None,
        }
    } else {
        LockError::invalid_config(message)
    }
}

/// `EACCES` or `EPERM`.
fn is_denied(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::PermissionDenied
}

/// Who owns `path` (or its nearest existing parent) and who we are, and
/// what to change.
fn who_may(path: &Path) -> String {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let owner = path
        .ancestors()
        .find_map(|p| std::fs::metadata(p).ok().map(|meta| (p, meta.uid())));
    match owner {
        Some((p, owner)) if owner != uid => format!(
            "`{}` belongs to uid {owner} and this process runs as uid {uid}: run as that user, \
             or give uid {uid} write access, or use a lock directory of its own",
            p.display()
        ),
        _ => format!(
            "this process runs as uid {uid}: give it write access (chmod u+w), or use a lock \
             directory of its own"
        ),
    }
}
