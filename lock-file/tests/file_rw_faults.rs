//! Read-write locks with a holder process frozen (`SIGSTOP`), on the file
//! store (the testkit's `scenarios::rw_faults`).
//!
//! The replacement cases the other stores run — a frozen writer or reader
//! replaced by the other kind once its lease runs out, then told it lost
//! and fenced off — cannot happen here: file locks do not expire (the
//! store declares no `Expiry`). A frozen process keeps its `flock` in the
//! kernel, and the lock comes back only when the process is gone. What
//! must hold instead, and is run here: the other kind stays out for as
//! long as the holder is frozen (well past the ttl), the resumed holder
//! still holds and its access is accepted, and once the holder's process
//! is killed the waiter gets in with a higher token; the register never
//! shows a reader beside a writer.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use distlock_testkit::child::HoldMode;
use distlock_testkit::scenarios::rw_faults::{
    child_holder, frozen_holder_is_kept, ChildRun, KeptPlan,
};
use lock_core::{Locker, LockerOptions};
use lock_file::{FileBackend, FileConfig};

/// Tells a child run of this binary what to hold: `MODE KEY DIR`.
const CHILD_VAR: &str = "DISTLOCK_FILE_RW_CHILD";
/// The lockers' ttl: it sets only how often a held lock is checked.
const TTL: Duration = Duration::from_secs(1);

/// A locker on the lock directory `dir`, with a ttl of [`TTL`].
fn locker(dir: &Path) -> Locker {
    let backend = FileBackend::open(FileConfig::new(dir)).expect("open the lock directory");
    let options = LockerOptions {
        ttl: TTL,
        ..LockerOptions::default()
    };
    Locker::new(Arc::new(backend), options)
}

/// Not a test: the child holder of the cases below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of the read-write fault tests"]
async fn rw_child() {
    child_holder(CHILD_VAR, |dir| async move { locker(Path::new(&dir)) }).await;
}

/// Freezes a child holding in `mode` for three ttls; see the module docs.
async fn kept(mode: HoldMode) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().expect("a UTF-8 temporary path");
    let here = locker(dir.path());
    assert!(
        !here.capabilities().expiry,
        "file locks expire now: run the replacement cases"
    );
    let plan = KeptPlan {
        locker: &here,
        child: ChildRun {
            test: "rw_child",
            var: CHILD_VAR,
            url: path,
        },
        frozen_for: TTL * 3,
        within: Duration::from_secs(5),
    };
    frozen_holder_is_kept(&plan, "frozen", mode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_writer_keeps_the_readers_out_until_its_process_is_gone() {
    kept(HoldMode::Write).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_reader_keeps_the_writer_out_until_its_process_is_gone() {
    kept(HoldMode::Read).await;
}
