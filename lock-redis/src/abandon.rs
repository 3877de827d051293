//! The clean-up of an abandoned acquisition: an acquisition that ends
//! without its hold (deadline, error, dropped call) leaves the line, and
//! gives back a hold its unanswered attempt may have taken, in the
//! background ([`LeaveOnDrop`]). The clean-up counts as under way (see
//! [`Leaving`](lock_core::backend::Leaving)) until its first call has been
//! answered.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::backend::{spawn_cleanup, HoldKind};
use lock_core::LockError;
use tokio::runtime::Handle;

use crate::conn::ScriptCall;
use crate::core::{RedisCore, WAITER_LIFE};
use crate::keys::LockKeys;
use crate::leaving::object_of;
use crate::retry::CleanupRetry;
use crate::scripts::scripts;
use lock_core::backend::Pending;

/// Leaves the line (and gives back a hold taken meanwhile) in the
/// background when dropped, unless [disarmed](Self::disarm); the clean-up
/// counts as under way from the drop on.
pub(crate) struct LeaveOnDrop {
    work: Option<Leave>,
    fallback: Option<Handle>,
}

/// One clean-up: `owner`'s `kind` acquisition of `keys`.
struct Leave {
    core: Arc<RedisCore>,
    keys: LockKeys,
    owner: String,
    ttl: Duration,
    kind: HoldKind,
}

impl LeaveOnDrop {
    /// Arms the clean-up of `owner`'s `kind` acquisition of `keys`.
    pub(crate) fn new(
        core: &Arc<RedisCore>,
        keys: &LockKeys,
        owner: &str,
        ttl: Duration,
        kind: HoldKind,
    ) -> Self {
        Self {
            work: Some(Leave {
                core: Arc::clone(core),
                keys: keys.clone(),
                owner: owner.to_owned(),
                ttl,
                kind,
            }),
            fallback: Handle::try_current().ok(),
        }
    }

    /// Cancels the clean-up: the acquisition holds.
    pub(crate) fn disarm(mut self) {
        self.work = None;
    }
}

impl Drop for LeaveOnDrop {
    fn drop(&mut self) {
        if let Some(work) = self.work.take() {
            let pending = work.core.leaving.start(object_of(&work.keys, work.kind));
            spawn_cleanup(self.fallback.as_ref(), work.run(pending));
        }
    }
}

impl std::fmt::Debug for LeaveOnDrop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaveOnDrop")
            .field("armed", &self.work.is_some())
            .finish()
    }
}

impl Leave {
    /// Takes the owner out of the line of the object it asked a hold of
    /// and gives back a hold it has there (letting the next waiters in),
    /// retrying until the server answers or the hold would have expired
    /// anyway. For an acquisition that ended without its hold, whose
    /// owner id is never used again. `pending` counts the clean-up as
    /// under way until the first answer (or failure).
    async fn run(self, pending: Pending) {
        let mut pending = Some(pending);
        let horizon = self.ttl.max(WAITER_LIFE) * 2 + Duration::from_secs(5);
        let mut retry = CleanupRetry::until(Instant::now() + horizon);
        let lock_keys = self.keys.with_readers();
        let semaphore_keys = self.keys.semaphore();
        let (script, names): (_, &[&str]) = match self.kind {
            HoldKind::Permit { .. } => (&scripts().release_permit, &semaphore_keys),
            _ => (&scripts().release_queued, &lock_keys),
        };
        let core = &self.core;
        loop {
            let outcome: Result<i64, LockError> = core
                .conn
                .eval(
                    core.timeouts,
                    &ScriptCall::new("leave the queue", script, names, &[&self.owner, &1]),
                )
                .await;
            pending.take();
            if outcome.is_ok() || !retry.pause().await {
                return;
            }
        }
    }
}
