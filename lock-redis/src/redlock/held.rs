//! A lock held on a majority of masters: renewals and release.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::join_all;
use lock_core::backend::HeldLock;
use lock_core::{LockError, LossReason};

use super::Inner;
use crate::conn::{self, Conn, ScriptCall, Timeouts};
use crate::renewal::{clone_error, renew_on, HeldKeys, RenewItem, RenewTarget};
use crate::scripts::scripts;

/// Renewals on every master: a lock stays ours while a majority renewed it.
pub(super) struct RedlockTarget {
    pub(super) nodes: Vec<Conn>,
    pub(super) timeouts: Timeouts,
    pub(super) quorum: usize,
}

#[async_trait]
impl RenewTarget for RedlockTarget {
    async fn renew_many(
        &self,
        ttl: Duration,
        items: &[RenewItem],
    ) -> (Vec<Result<bool, LockError>>, u64) {
        let per_node = join_all(
            self.nodes
                .iter()
                .map(|n| renew_on(n, self.timeouts, ttl, items)),
        )
        .await;
        let round_trips = per_node.iter().map(|(_, trips)| trips).sum();
        let n = self.nodes.len();
        let results = (0..items.len())
            .map(|i| {
                let renewed = per_node
                    .iter()
                    .filter(|(r, _)| matches!(r[i], Ok(true)))
                    .count();
                let refused = per_node
                    .iter()
                    .filter(|(r, _)| matches!(r[i], Ok(false)))
                    .count();
                if renewed >= self.quorum {
                    Ok(true)
                } else if refused > n - self.quorum {
                    Ok(false)
                } else {
                    let error = per_node.iter().find_map(|(r, _)| r[i].as_ref().err());
                    Err(error
                        .map(clone_error)
                        .unwrap_or_else(|| LockError::Unavailable {
                            message: format!("Redlock renew: {renewed} of {n} masters renewed"),
                            source: None,
                        }))
                }
            })
            .collect();
        (results, round_trips)
    }
}

/// One lock held on a majority of masters.
pub(super) struct RedlockHeld {
    pub(super) inner: Arc<Inner>,
    pub(super) lock: HeldKeys,
}

impl fmt::Debug for RedlockHeld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedlockHeld").field(&self.lock).finish()
    }
}

#[async_trait]
impl HeldLock for RedlockHeld {
    async fn renew(&self, ttl: Duration) -> Result<(), LockError> {
        self.lock.renew(&self.inner.renewer, ttl).await
    }

    async fn release(&self) -> Result<(), LockError> {
        let (lock, args): ([&str; 1], [&dyn conn::ToArg; 2]) = (
            [self.lock.keys.lock.as_str()],
            [&self.lock.owner, &self.lock.keys.channel],
        );
        let call = ScriptCall::new("Redlock release", &scripts().release, &lock, &args);
        let outcomes = self
            .inner
            .eval_on::<i64>(0..self.inner.nodes.len(), &call)
            .await;
        let released = outcomes.iter().filter(|o| matches!(o, Ok(1))).count();
        let unknown = outcomes.iter().filter(|o| o.is_err()).count();
        if released >= self.inner.quorum
            || (released > 0 && released + unknown >= self.inner.quorum)
        {
            Ok(())
        } else if released + unknown >= self.inner.quorum {
            Err(LockError::Unavailable {
                message: format!(
                    "Redlock release: {unknown} of {} masters did not answer",
                    outcomes.len()
                ),
                source: None,
            })
        } else {
            Err(LockError::lost(
                self.lock.key.clone(),
                LossReason::RenewalRefused,
            ))
        }
    }
}
