//! A run of this test binary as a child process: one ignored test, told
//! what to do through an environment variable, reporting line by line on
//! its stdout. For lock holders and leaders that must be paused or killed.

use std::time::{Duration, Instant};

pub(crate) use distlock_testkit::child::TestChild as Child;
use distlock_testkit::{assert_not_before, FencedResource};

/// How long a child's 2 s lease, renewed every third of it, runs at
/// least after the child is frozen.
pub(crate) const LEASE_LEFT: Duration = Duration::from_millis(1200);

/// The successor of a child frozen at `paused_at`, with token (or term)
/// `new` after the child's `old`: panics unless it came in no sooner than
/// the child's lease could end and `new` is above `old`, then writes
/// `value` to `resource` with `new`.
#[allow(dead_code)] // each binary uses what it needs
pub(crate) fn successor_writes(
    resource: &FencedResource,
    paused_at: Instant,
    (old, new): (u64, u64),
    value: &str,
) {
    assert_not_before(paused_at, LEASE_LEFT, "in after the pause, the lease alive");
    assert!(new > old, "{new} after {old}");
    resource.write(new, value).unwrap();
}
