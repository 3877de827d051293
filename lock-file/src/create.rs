//! Creating the store's files and directories with the modes its lock
//! directory calls for.
//!
//! In a directory that only its owner may write to, files and
//! directories are created as before: [`FILE_MODE`] and `0o777`, minus
//! the umask. In a directory others may write to ([`Sharing::With`]: the
//! default directory, `/tmp`-like directories), everything created inside
//! must be usable by them too, whatever the creator's umask: files get
//! `0o666` and directories `0o777` (`0o660` and `0o770` where only the
//! group may write). Those modes are set before the entry appears at its
//! name, so nobody ever sees it narrower:
//!
//! * a file is created under a temporary name, given its mode with
//!   `fchmod`, then linked to its name (`link` fails if the name exists:
//!   no file is ever replaced) and the temporary name removed (on a file
//!   system without hard links, it is created in place and given its mode
//!   a moment later);
//! * a directory is created under a temporary name, given its mode with
//!   `chmod`, then renamed to its name without replacing anything
//!   (`renameat2(RENAME_NOREPLACE)` on Linux; elsewhere `rename`, which
//!   may replace an *empty* directory made at the same instant: harmless,
//!   as nothing here keeps a directory open).
//!
//! Temporary names start with a dot (no lock file does) and carry the
//! process id and a counter; a process killed between the two steps
//! leaves one behind.

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Mode of the lock files the backend creates in a directory only its
/// owner may write to, before the umask.
pub const FILE_MODE: u32 = 0o644;
/// How often creating a file or directory is tried again when its name,
/// or the directory it goes in, changes under it (another process
/// creating or removing it at the same time).
const MAX_TRIES: usize = 16;

/// Who may use what the store creates, as decided by the lock directory's
/// own mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sharing {
    /// Only the directory's owner may write in it: modes as the umask
    /// makes them.
    Private,
    /// Others may write in it too: these modes, set explicitly.
    With {
        /// Mode of new files.
        file: u32,
        /// Mode of new directories.
        dir: u32,
    },
}

impl Sharing {
    /// The sharing a lock directory of `mode` calls for: everyone may
    /// write (`o+w`) → `0o666`/`0o777`; only the group (`g+w`) →
    /// `0o660`/`0o770`; else private.
    pub(crate) fn of_directory_mode(mode: u32) -> Self {
        if mode & 0o002 != 0 {
            Self::With {
                file: 0o666,
                dir: 0o777,
            }
        } else if mode & 0o020 != 0 {
            Self::With {
                file: 0o660,
                dir: 0o770,
            }
        } else {
            Self::Private
        }
    }
}

/// How a store writes: the modes of what it creates and whether it syncs
/// its fencing counters to disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Disk {
    pub(crate) sharing: Sharing,
    pub(crate) fsync: bool,
}

/// Opens `path` read-write, creating it (and its directory) if missing,
/// with the mode `sharing` calls for. Never follows a symlink at the last
/// component, and never replaces a file.
pub(crate) fn open_creating(path: &Path, sharing: Sharing) -> io::Result<File> {
    for _ in 0..MAX_TRIES {
        let opened = match sharing {
            Sharing::Private => open(path, true).map(Some),
            Sharing::With { file, .. } => match open(path, false) {
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    create_file_shared(path, file)
                }
                other => other.map(Some),
            },
        };
        match opened {
            Ok(Some(file)) => return Ok(file),
            // Someone else created the name first: open theirs.
            Ok(None) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                // The directory is missing (or went while we worked in it).
                if let Some(dir) = path.parent() {
                    create_dir(dir, sharing)?;
                }
            }
            Err(error) => return Err(error),
        }
    }
    Err(io::Error::other(format!(
        "`{}` kept being created and removed while opening it",
        path.display()
    )))
}

/// `open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC [| O_CREAT])`.
fn open(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Creates the file `path` with `mode` through a temporary name;
/// `Ok(None)` if `path` appeared meanwhile.
fn create_file_shared(path: &Path, mode: u32) -> io::Result<Option<File>> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let (file, temporary) = loop {
        let temporary = temporary_name(dir, path);
        if let Some(file) = create_new_private(&temporary)? {
            break (file, temporary);
        }
    };
    let linked = file
        .set_permissions(fs::Permissions::from_mode(mode))
        .and_then(|()| fs::hard_link(&temporary, path));
    let _ = fs::remove_file(&temporary);
    match linked {
        Ok(()) => Ok(Some(file)),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(None),
        // A file system without hard links: create it in place, its mode
        // set a moment later.
        Err(error) if matches!(error.raw_os_error(), Some(libc::EPERM | libc::EOPNOTSUPP)) => {
            create_in_place(path, mode)
        }
        Err(error) => Err(error),
    }
}

/// Creates the file `path` with `O_EXCL`, then gives it `mode`; `Ok(None)`
/// if it exists.
fn create_in_place(path: &Path, mode: u32) -> io::Result<Option<File>> {
    let Some(file) = create_new_private(path)? else {
        return Ok(None);
    };
    file.set_permissions(fs::Permissions::from_mode(mode))?;
    Ok(Some(file))
}

/// `open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)`:
/// a new file only its owner can open until it is given its mode;
/// `Ok(None)` if `path` exists.
fn create_new_private(path: &Path) -> io::Result<Option<File>> {
    match OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(file) => Ok(Some(file)),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(None),
        Err(error) => Err(error),
    }
}

/// Creates the directory `path` (and missing parents) unless it exists,
/// with the mode `sharing` calls for.
pub(crate) fn create_dir(path: &Path, sharing: Sharing) -> io::Result<()> {
    match sharing {
        Sharing::Private => fs::create_dir_all(path),
        Sharing::With { dir, .. } => {
            for _ in 0..MAX_TRIES {
                match create_dir_with_mode(path, dir) {
                    Err(error) if error.kind() == io::ErrorKind::NotFound => {
                        if let Some(parent) = path.parent().filter(|p| *p != path) {
                            create_dir(parent, sharing)?;
                        }
                    }
                    other => return other,
                }
            }
            Err(io::Error::other(format!(
                "`{}` kept being removed while creating it",
                path.display()
            )))
        }
    }
}

/// Creates the directory `path` with exactly `mode` (plus the set-group-id
/// bit it inherits), through a temporary name; an existing directory is
/// left as it is. `NotFound` if the parent is missing.
pub(crate) fn create_dir_with_mode(path: &Path, mode: u32) -> io::Result<()> {
    if fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return Ok(());
    }
    let parent = path.parent().unwrap_or(Path::new("/"));
    let temporary = loop {
        let temporary = temporary_name(parent, path);
        match fs::DirBuilder::new().mode(0o700).create(&temporary) {
            Ok(()) => break temporary,
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(error),
        }
    };
    let placed = fs::metadata(&temporary)
        .and_then(|made| {
            let inherited = made.mode() & 0o2000;
            fs::set_permissions(&temporary, fs::Permissions::from_mode(mode | inherited))
        })
        .and_then(|()| rename_no_replace(&temporary, path));
    match placed {
        Ok(()) => Ok(()),
        Err(error) => {
            let _ = fs::remove_dir(&temporary);
            match fs::metadata(path) {
                // Made by someone else meanwhile.
                Ok(meta) if meta.is_dir() => Ok(()),
                _ => Err(error),
            }
        }
    }
}

/// A fresh name in `dir` for a file or directory that will become `path`.
fn temporary_name(dir: &Path, path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    dir.join(format!(
        ".{name}.new-{}-{}-{nanos:x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Renames `from` to `to` unless `to` exists (`AlreadyExists` then).
fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let c = |p: &Path| {
            CString::new(p.as_os_str().as_bytes()).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte")
            })
        };
        let (c_from, c_to) = (c(from)?, c(to)?);
        // SAFETY: both are valid NUL-terminated strings for the call's
        // duration; AT_FDCWD makes them relative to the working directory
        // like rename(2).
        let done = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                c_from.as_ptr(),
                libc::AT_FDCWD,
                c_to.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if done == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        // File systems without RENAME_NOREPLACE: plain rename below.
        if !matches!(error.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) {
            return Err(error);
        }
    }
    if fs::symlink_metadata(to).is_ok() {
        return Err(io::ErrorKind::AlreadyExists.into());
    }
    fs::rename(from, to)
}

/// Syncs the directory `dir` (after creating an entry in it that must
/// survive a machine crash).
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn the_directory_mode_decides_the_sharing() {
        assert_eq!(Sharing::of_directory_mode(0o700), Sharing::Private);
        assert_eq!(Sharing::of_directory_mode(0o755), Sharing::Private);
        assert_eq!(
            Sharing::of_directory_mode(0o1777),
            Sharing::With {
                file: 0o666,
                dir: 0o777
            }
        );
        assert_eq!(
            Sharing::of_directory_mode(0o2770),
            Sharing::With {
                file: 0o660,
                dir: 0o770
            }
        );
    }

    #[test]
    fn shared_files_and_directories_get_their_modes_and_no_temporary_stays() {
        let root = tempfile::tempdir().unwrap();
        let sharing = Sharing::of_directory_mode(0o777);
        let path = root.path().join("ns/sub/k.lock");
        let file = open_creating(&path, sharing).unwrap();
        assert_eq!(file.metadata().unwrap().mode() & 0o7777, 0o666);
        for dir in [root.path().join("ns"), root.path().join("ns/sub")] {
            assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o7777, 0o777);
        }
        // Opened again, not replaced.
        let again = open_creating(&path, sharing).unwrap();
        assert_eq!(
            again.metadata().unwrap().ino(),
            file.metadata().unwrap().ino()
        );
        let names: Vec<_> = fs::read_dir(root.path().join("ns/sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["k.lock"]);
    }

    #[test]
    fn an_existing_directory_keeps_its_mode() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("d");
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o750)).unwrap();
        create_dir_with_mode(&dir, 0o1777).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o7777, 0o750);
        assert!(matches!(
            create_dir_with_mode(&root.path().join("missing/d"), 0o1777),
            Err(e) if e.kind() == io::ErrorKind::NotFound
        ));
    }

    /// A lock file's name `k.lock` in `dir` that is a symlink to another
    /// file: what an attacker in a shared directory would plant. Returns
    /// the link and a check that the file it points at is untouched.
    pub(crate) fn planted_symlink(dir: &Path) -> (PathBuf, impl Fn()) {
        let target = dir.join("precious");
        fs::write(&target, "keep me").unwrap();
        let path = dir.join("k.lock");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let untouched = move || assert_eq!(fs::read_to_string(&target).unwrap(), "keep me");
        (path, untouched)
    }

    #[test]
    fn symlinks_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let (path, assert_untouched) = planted_symlink(dir.path());
        for sharing in [Sharing::Private, Sharing::of_directory_mode(0o777)] {
            assert!(open_creating(&path, sharing).is_err());
        }
        assert_untouched();
    }
}
