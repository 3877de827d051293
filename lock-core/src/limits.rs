//! The bounds on what a caller hands the lock API: the shortest lease,
//! the longest holder value, the largest semaphore limit. Errors quote
//! them, so they sit below [`crate::error`] and import nothing.

use std::time::Duration;

/// The shortest lease accepted: renewals run at a third of it.
pub const MIN_TTL: Duration = Duration::from_millis(30);
/// The longest holder value accepted, in bytes of UTF-8.
pub const MAX_VALUE_LEN: usize = 4096;
/// The largest semaphore limit accepted.
pub const MAX_SEMAPHORE_LIMIT: u32 = 1024;
