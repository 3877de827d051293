//! [`RedisHeld`]: one hold taken on an instance or a cluster — a lock
//! (plain, leader or writer), a read lock or a semaphore's permit.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{HeldLock, HoldKind};
use lock_core::LockError;

use crate::conn::{ScriptCall, ToArg};
use crate::core::RedisCore;
use crate::renewal::HeldKeys;
use crate::scripts::scripts;
use crate::shared::hold_keys;

/// One hold on an instance or cluster.
pub(crate) struct RedisHeld {
    core: Arc<RedisCore>,
    lock: HeldKeys,
    kind: HoldKind,
}

impl RedisHeld {
    /// The `kind` hold of `lock` on `core`'s server.
    pub(crate) fn new(core: Arc<RedisCore>, lock: HeldKeys, kind: HoldKind) -> Self {
        Self { core, lock, kind }
    }

    /// Runs a script that answers 1 if the hold is still ours.
    async fn owner_checked(&self, call: &ScriptCall<'_>) -> Result<(), LockError> {
        let ours: i64 = self.core.conn.eval(self.core.timeouts, call).await?;
        self.lock.confirm(ours == 1)
    }
}

impl fmt::Debug for RedisHeld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedisHeld")
            .field(&self.lock)
            .field(&self.kind)
            .finish()
    }
}

#[async_trait]
impl HeldLock for RedisHeld {
    async fn renew(&self, ttl: Duration) -> Result<(), LockError> {
        let Some(keys) = hold_keys(&self.lock.keys, self.kind) else {
            return self.lock.renew(&self.core.renewer, ttl).await;
        };
        // A permit's limit must outlive it: its expiry follows too.
        let with_limit = [keys[0], keys[1], self.lock.keys.limit()];
        let names: &[&str] = match self.kind {
            HoldKind::Permit { .. } => &with_limit,
            _ => &keys,
        };
        let ttl_ms = ttl.as_millis() as u64;
        let args: [&dyn ToArg; 2] = [&self.lock.owner, &ttl_ms];
        let call = ScriptCall::new("renew", &scripts().renew_hold, names, &args);
        self.owner_checked(&call.idempotent()).await
    }

    async fn release(&self) -> Result<(), LockError> {
        let lock_keys = self.lock.keys.with_readers();
        let semaphore_keys = self.lock.keys.semaphore();
        let (script, keys): (_, &[&str]) = match self.kind {
            HoldKind::Permit { .. } => (&scripts().release_permit, &semaphore_keys),
            _ => (&scripts().release_queued, &lock_keys),
        };
        let args: [&dyn ToArg; 2] = [&self.lock.owner, &0];
        self.owner_checked(&ScriptCall::new("release", script, keys, &args))
            .await
    }

    async fn set_value(&self, value: &str) -> Result<(), LockError> {
        let args: [&dyn ToArg; 2] = [&self.lock.owner, &value];
        match hold_keys(&self.lock.keys, self.kind) {
            None => {
                let keys = self.lock.keys.watched_lock();
                let call = ScriptCall::new("set value", &scripts().set_value, &keys, &args);
                self.owner_checked(&call.idempotent()).await
            }
            Some(keys) => {
                let call = ScriptCall::new("set value", &scripts().set_hold_value, &keys, &args);
                self.owner_checked(&call.idempotent()).await
            }
        }
    }
}
