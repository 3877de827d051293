//! One run of the acquire script of a request's kind (exclusive, read or
//! permit) on an instance, a cluster or a Sentinel master, and the hold
//! it gives.

use std::sync::Arc;
use std::time::Instant;

use lock_core::backend::{AcquireRequest, Acquired, Attempt, HoldKind, Renewal};
use lock_core::{FencingToken, LockError};

use crate::abandon::LeaveOnDrop;
use crate::conn::{ScriptCall, ToArg};
use crate::core::{RedisCore, WAITER_LIFE};
use crate::held::RedisHeld;
use crate::keys::LockKeys;
use crate::leaving::object_of;
use crate::renewal::HeldKeys;
use crate::scripts::{limit_mismatch, scripts, AcquireReply};
use crate::shared::limit_arg;

/// What the acquire script does when the lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueueMode {
    /// Nothing: a `try_lock`, or Redlock.
    Never,
    /// Join the queue.
    Join,
    /// Renew our place in the queue (and leave it if the lock is free).
    Joined,
}

impl QueueMode {
    /// The script's argument.
    pub(crate) fn arg(self) -> u8 {
        match self {
            Self::Never => 0,
            Self::Join => 1,
            Self::Joined => 2,
        }
    }
}

/// One run of the acquire script of `request`'s kind (exclusive, read
/// or permit) on the lock `keys` names; the reply and when the call was
/// sent. A call that fails or is dropped before its reply leaves a
/// clean-up behind (out of the queue, and an owner-checked release), so
/// a late execution on the server cannot leave an orphan hold or a
/// phantom waiter. Waits first for the clean-ups of the same object
/// still under way on `core` (see [`Leaving`](lock_core::backend::Leaving)).
pub(crate) async fn attempt(
    core: &Arc<RedisCore>,
    keys: &LockKeys,
    request: &AcquireRequest,
    mode: QueueMode,
) -> Result<(AcquireReply, Instant), LockError> {
    let owner = request.owner.as_str();
    let kind = request.kind;
    let timeouts = core.timeouts;
    core.leaving
        .settled(object_of(keys, kind), timeouts.overall)
        .await;
    let requested_at = Instant::now();
    let cleanup = LeaveOnDrop::new(core, keys, owner, request.ttl, kind);
    let ttl_ms = request.ttl.as_millis() as u64;
    let waiter_life_ms = WAITER_LIFE.as_millis() as u64;
    let grant_channel = core.listener.grant_channel();
    let lock_keys = keys.with_readers();
    let semaphore_keys = keys.semaphore();
    let limit = limit_arg(kind);
    let (what, script, names): (_, _, &[&str]) = match kind {
        HoldKind::Shared => ("acquire a read lock", &scripts().acquire_read, &lock_keys),
        HoldKind::Permit { .. } => (
            "acquire a permit",
            &scripts().acquire_permit,
            &semaphore_keys,
        ),
        _ => ("acquire", &scripts().acquire, &lock_keys),
    };
    let args: [&dyn ToArg; 7] = [
        &owner,
        &ttl_ms,
        &mode.arg(),
        &waiter_life_ms,
        &grant_channel,
        &request.value,
        &limit,
    ];
    // The exclusive script takes six arguments: no seventh to send.
    let args = if limit.is_empty() {
        &args[..6]
    } else {
        &args[..]
    };
    let reply: Vec<i64> = core
        .conn
        .eval(
            timeouts,
            &ScriptCall::new(what, script, names, args).idempotent(),
        )
        .await?;
    cleanup.disarm();
    if let Some(stored) = limit_mismatch(&reply) {
        let HoldKind::Permit { limit: asked } = kind else {
            unreachable!("only permits have limits")
        };
        return Err(LockError::LimitMismatch {
            key: request.name.key().to_string(),
            stored,
            asked,
        });
    }
    Ok((AcquireReply::parse(&reply), requested_at))
}

/// The lock `request` asked for, held on `core`'s server with `token`
/// since at least `at`.
pub(crate) fn acquired(
    core: &Arc<RedisCore>,
    keys: LockKeys,
    request: &AcquireRequest,
    token: FencingToken,
    at: Instant,
) -> Attempt {
    Attempt::Acquired(Acquired {
        token,
        requested_at: at,
        renewal: Renewal::Lease,
        held: Box::new(RedisHeld::new(
            Arc::clone(core),
            HeldKeys::new(keys, request),
            request.kind,
        )),
    })
}
