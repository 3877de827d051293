//! A lock held on a majority of masters: renewals and release.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::join_all;
use lock_core::backend::HeldLock;
use lock_core::LockError;

use super::core::RedlockCore;
use crate::conn::{Conn, ScriptCall, ToArg};
use crate::deadline::Timeouts;
use crate::renewal::{clone_error, renew_on, HeldKeys, RenewItem, RenewTarget};
use crate::scripts::scripts;
use crate::value::redlock_rest;

/// Renewals on every master: a lock stays ours while a majority renewed it.
pub(super) struct RedlockTarget {
    pub(super) nodes: Vec<Conn>,
    pub(super) timeouts: Timeouts,
    pub(super) quorum: usize,
}

#[async_trait]
impl RenewTarget for RedlockTarget {
    async fn renew_many(&self, ttl: Duration, items: &[RenewItem]) -> Vec<Result<bool, LockError>> {
        let per_node = join_all(
            self.nodes
                .iter()
                .map(|n| renew_on(n, self.timeouts, ttl, items)),
        )
        .await;
        let n = self.nodes.len();
        (0..items.len())
            .map(|i| {
                let renewed = per_node.iter().filter(|r| matches!(r[i], Ok(true))).count();
                let refused = per_node
                    .iter()
                    .filter(|r| matches!(r[i], Ok(false)))
                    .count();
                if renewed >= self.quorum {
                    Ok(true)
                } else if refused > n - self.quorum {
                    Ok(false)
                } else {
                    let error = per_node.iter().find_map(|r| r[i].as_ref().err());
                    Err(error
                        .map(clone_error)
                        .unwrap_or_else(|| LockError::Unavailable {
                            message: format!("Redlock renew: {renewed} of {n} masters renewed"),
                            source: None,
                        }))
                }
            })
            .collect()
    }
}

/// One lock held on a majority of masters.
pub(super) struct RedlockHeld {
    core: Arc<RedlockCore>,
    lock: HeldKeys,
    /// The number of the last value written (the acquire's is 0).
    values: AtomicU64,
}

impl RedlockHeld {
    /// The lock `lock` names, just taken.
    pub(super) fn new(core: Arc<RedlockCore>, lock: HeldKeys) -> Self {
        Self {
            core,
            lock,
            values: AtomicU64::new(0),
        }
    }

    /// Runs an owner-checked `call` on every master: `Ok` if a majority
    /// confirmed (or, with `partial`, at least one did and those that did
    /// not answer could make up the rest), [`LockError::Lost`] if too many
    /// refused for a majority to remain, else [`LockError::Unavailable`],
    /// whose message names the call as `Redlock <what>`.
    async fn on_masters(
        &self,
        what: &str,
        call: &ScriptCall<'_>,
        partial: bool,
    ) -> Result<(), LockError> {
        let outcomes = self
            .core
            .eval_on::<i64>(0..self.core.nodes.len(), call)
            .await;
        let done = outcomes.iter().filter(|o| matches!(o, Ok(1))).count();
        let unknown = outcomes.iter().filter(|o| o.is_err()).count();
        let quorum = self.core.quorum;
        if done >= quorum || (partial && done > 0 && done + unknown >= quorum) {
            Ok(())
        } else if done + unknown >= quorum {
            Err(LockError::Unavailable {
                message: format!(
                    "Redlock {what}: {unknown} of {} masters did not answer",
                    outcomes.len()
                ),
                source: None,
            })
        } else {
            self.lock.confirm(false)
        }
    }
}

impl fmt::Debug for RedlockHeld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedlockHeld").field(&self.lock).finish()
    }
}

#[async_trait]
impl HeldLock for RedlockHeld {
    async fn renew(&self, ttl: Duration) -> Result<(), LockError> {
        self.lock.renew(&self.core.renewer, ttl).await
    }

    async fn release(&self) -> Result<(), LockError> {
        let args: [&dyn ToArg; 2] = [&self.lock.owner, &self.lock.keys.channel()];
        let lock = self.lock.keys.watched_lock();
        let call = ScriptCall::new("Redlock release", &scripts().release, &lock, &args);
        self.on_masters("release", &call, true).await
    }

    async fn set_value(&self, value: &str) -> Result<(), LockError> {
        // Numbered, so that a read prefers it to any earlier value that a
        // master it reads from may still hold.
        let seq = self.values.fetch_add(1, Ordering::Relaxed) + 1;
        let rest = redlock_rest(seq, value);
        let args: [&dyn ToArg; 2] = [&self.lock.owner, &rest];
        let lock = self.lock.keys.watched_lock();
        let call = ScriptCall::new("set value", &scripts().set_value, &lock, &args);
        self.on_masters("set value", &call.idempotent(), false)
            .await
    }
}
