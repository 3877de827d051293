//! Where test servers keep their data dirs and logs.
//!
//! Each etcd member preallocates a 64 MiB write-ahead log and each
//! ZooKeeper server a transaction log, so a test binary that starts a few
//! clusters needs hundreds of MiB. On a build machine whose disk is nearly
//! full (the test build itself takes gigabytes) such a server dies at start
//! with "no space left on device". Tests therefore keep server data in
//! memory (`/dev/shm`) when that has room: a server killed and restarted
//! still finds its data there, which is all the tests need. Benchmarks
//! call [`keep_data_on_disk`] so that etcd's and ZooKeeper's syncs cost
//! what they cost in a deployment.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Environment variable naming the directory for server data, overriding
/// the choice below.
pub const DATA_ROOT_VAR: &str = "DISTLOCK_TEST_DATA_ROOT";
/// The memory-backed directory used when it has room.
const MEMORY_ROOT: &str = "/dev/shm";
/// Free space `/dev/shm` needs to be chosen (Docker's default of 64 MiB
/// would not hold one etcd member).
const MIN_MEMORY_ROOT_BYTES: u64 = 2 << 30;

static ROOT: OnceLock<PathBuf> = OnceLock::new();

/// The directory under which every [`crate::Server`] of this
/// process gets its temp dir: `$DISTLOCK_TEST_DATA_ROOT` if set, else
/// `/dev/shm` if it has at least 2 GiB free, else the system temp dir.
/// Chosen once per process.
pub fn data_root() -> &'static Path {
    ROOT.get_or_init(|| {
        if let Some(dir) = root_from_env() {
            return dir;
        }
        let memory = Path::new(MEMORY_ROOT);
        if available_bytes(memory).is_some_and(|free| free >= MIN_MEMORY_ROOT_BYTES) {
            return memory.to_owned();
        }
        std::env::temp_dir()
    })
}

/// Makes later servers of this process keep their data in the system temp
/// dir (on disk), unless `$DISTLOCK_TEST_DATA_ROOT` names another place.
/// Has no effect once a server has started.
pub fn keep_data_on_disk() {
    let _ = ROOT.set(root_from_env().unwrap_or_else(std::env::temp_dir));
}

/// The directory `$DISTLOCK_TEST_DATA_ROOT` names, if set.
fn root_from_env() -> Option<PathBuf> {
    std::env::var_os(DATA_ROOT_VAR).map(PathBuf::from)
}

/// Bytes available to unprivileged writers on the file system holding
/// `path`, or `None` if it cannot be read (e.g. `path` does not exist).
pub fn available_bytes(path: &Path) -> Option<u64> {
    let c_path = CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c_path` is a NUL-terminated string and `stats` points to
    // writable memory of the right type; statvfs only writes to it.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), stats.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `stats`.
    let stats = unsafe { stats.assume_init() };
    #[allow(clippy::useless_conversion)] // the field types differ by platform
    let (blocks, size) = (u64::from(stats.f_bavail), u64::from(stats.f_frsize));
    Some(blocks.saturating_mul(size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_temp_dir_has_a_readable_free_space() {
        assert!(available_bytes(&std::env::temp_dir()).is_some());
    }

    #[test]
    fn a_missing_path_has_no_free_space() {
        assert_eq!(available_bytes(Path::new("/no/such/dir/at/all")), None);
    }
}
