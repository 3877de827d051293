//! Waiting in test assertions for something that happens asynchronously.
//!
//! For test assertions only: code under test should be woken by events,
//! never by polling.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use tokio::time::{sleep, timeout, Instant};

/// Pause between two checks of [`eventually`].
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The result of one check in [`eventually`]: done with a value, or not
/// yet (with a reason for the timeout message, where there is one).
pub trait Check {
    /// What [`eventually`] returns once the check passes.
    type Value;

    /// `Ok(value)` if done, `Err(reason)` if not yet.
    fn outcome(self) -> Result<Self::Value, Option<String>>;
}

/// `true` passes.
impl Check for bool {
    type Value = ();

    fn outcome(self) -> Result<(), Option<String>> {
        if self {
            Ok(())
        } else {
            Err(None)
        }
    }
}

/// `Some(value)` passes with that value.
impl<T> Check for Option<T> {
    type Value = T;

    fn outcome(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

/// `Ok(value)` passes; the last `Err` is quoted if the time runs out.
impl<T, E: Display> Check for Result<T, E> {
    type Value = T;

    fn outcome(self) -> Result<T, Option<String>> {
        self.map_err(|e| Some(e.to_string()))
    }
}

/// Panics unless at least `at_least` has passed since `since`: `what`
/// (say, "taken after the pause") happened no sooner than it may.
#[track_caller]
pub fn assert_not_before(since: std::time::Instant, at_least: Duration, what: &str) {
    let elapsed = since.elapsed();
    assert!(
        elapsed >= at_least,
        "{what} {elapsed:?} on, before the {at_least:?} it may not come sooner than"
    );
}

/// Runs the check `f` every 20 ms until it passes (`true`, `Some`, `Ok`)
/// and returns its value, or fails once `limit` has passed with an error
/// naming `what` (and the last error the check gave, if any). A check
/// that hangs is cut off at the deadline.
pub async fn eventually<F, Fut>(
    limit: Duration,
    what: &str,
    mut f: F,
) -> Result<<Fut::Output as Check>::Value, String>
where
    F: FnMut() -> Fut,
    Fut: Future,
    Fut::Output: Check,
{
    let deadline = Instant::now() + limit;
    let mut last_reason = None;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match timeout(remaining, f()).await.map(Check::outcome) {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(reason)) => last_reason = reason.or(last_reason),
            // Cut off at the deadline: keep what the checks before it said.
            Err(_) => {
                last_reason = Some(match last_reason {
                    Some(reason) => format!("{reason}; the check after it hung"),
                    None => "the last check hung".into(),
                })
            }
        }
        if Instant::now() >= deadline {
            let why = last_reason
                .map(|r| format!(" (last: {r})"))
                .unwrap_or_default();
            return Err(format!("timed out after {limit:?} waiting for {what}{why}"));
        }
        sleep(POLL_INTERVAL).await;
    }
}
