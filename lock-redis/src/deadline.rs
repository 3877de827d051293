//! The overall bound on one command: [`Timeouts`], and running a call
//! within it.

use std::future::Future;
use std::time::Duration;

use lock_core::LockError;

use crate::config::RedisConfig;
use crate::errors::map_error;

/// Deadlines for one command.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    /// Bound for one command including a reconnect it may wait for.
    pub(crate) overall: Duration,
}

impl Timeouts {
    /// The bound of `config`'s commands: one connect and one reply.
    pub(crate) fn new(config: &RedisConfig) -> Self {
        // A command may wait for a reconnect (one connect) and then its reply.
        Self {
            overall: config.connect_timeout + config.response_timeout,
        }
    }
}

/// Runs `call` within the overall bound of `timeouts`; a failure or a
/// timeout becomes a [`LockError`] naming `what` was being done.
pub(crate) async fn bounded<T>(
    what: &str,
    timeouts: Timeouts,
    call: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, LockError> {
    within(what, timeouts, async {
        call.await.map_err(|e| map_error(what, e))
    })
    .await
}

/// `call` within the overall bound of `timeouts`; a timeout becomes an
/// `Unavailable` naming `what` was being done.
pub(crate) async fn within<T>(
    what: &str,
    timeouts: Timeouts,
    call: impl Future<Output = Result<T, LockError>>,
) -> Result<T, LockError> {
    tokio::time::timeout(timeouts.overall, call)
        .await
        .unwrap_or_else(|_| Err(timed_out(what, timeouts.overall)))
}

/// The error of a call that got `after` and no reply.
fn timed_out(what: &str, after: Duration) -> LockError {
    LockError::Unavailable {
        message: format!("{what}: no reply within {after:?}"),
        source: None,
    }
}
