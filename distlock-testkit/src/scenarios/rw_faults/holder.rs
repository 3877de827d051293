//! Holders of this process, each taking its lock in a task of its own
//! and using the register until stopped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use lock_core::{LockError, LockOptions, Locker};
use tokio::task::JoinHandle;

use super::{Access, RwRegister, ACCESS_EVERY};
use crate::child::HoldMode;
use crate::eventually;
use crate::fencing::StaleToken;

/// A holder of this process: takes its lock in a task of its own, then
/// uses the register every 20 ms until stopped, and releases.
pub(super) struct Holder {
    pub(super) who: String,
    granted: Arc<OnceLock<Result<(u64, Instant), String>>>,
    stop: Arc<AtomicBool>,
    task: JoinHandle<HolderEnd>,
}

/// How a [`Holder`] ended.
#[derive(Debug)]
struct HolderEnd {
    refused: Vec<StaleToken>,
    lost: Option<lock_core::LossReason>,
    released: Result<(), LockError>,
}

impl Holder {
    pub(super) fn spawn(
        locker: &Locker,
        key: &str,
        mode: HoldMode,
        register: &RwRegister,
        (who, wait): (String, Duration),
    ) -> Self {
        let granted = Arc::new(OnceLock::new());
        let stop = Arc::new(AtomicBool::new(false));
        let (locker, key, register) = (locker.clone(), key.to_owned(), register.clone());
        let (got, stopped, name) = (granted.clone(), stop.clone(), who.clone());
        let task = tokio::spawn(async move {
            let guard = match mode
                .take(&locker, &key, LockOptions::new().wait(wait))
                .await
            {
                Ok(guard) => guard,
                Err(error) => {
                    let _ = got.set(Err(error.to_string()));
                    return HolderEnd {
                        refused: Vec::new(),
                        lost: None,
                        released: Err(error),
                    };
                }
            };
            let token = guard.token().get();
            let _ = got.set(Ok((token, Instant::now())));
            let mut refused = Vec::new();
            loop {
                if let Some(stale) = register.present(&name, Access::of(mode), token).refused {
                    refused.push(stale);
                }
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                tokio::time::sleep(ACCESS_EVERY).await;
            }
            let lost = guard.loss_signal().loss_reason();
            HolderEnd {
                refused,
                lost,
                released: guard.release().await,
            }
        });
        Self {
            who,
            granted,
            stop,
            task,
        }
    }

    /// Panics if it got its lock: `what` says beside whom.
    pub(super) fn assert_out(&self, what: &str) {
        if let Some(granted) = self.granted.get() {
            match granted {
                Ok((token, _)) => panic!("{} got in with token {token} {what}", self.who),
                Err(error) => panic!("{} failed: {error}", self.who),
            }
        }
    }

    /// Its token and when it got it, within `limit`.
    pub(super) async fn granted(&self, limit: Duration) -> (u64, Instant) {
        let what = format!("{} to get in (its lock's holder frozen or gone)", self.who);
        let granted = eventually(limit, &what, || async { self.granted.get().cloned() })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        granted.unwrap_or_else(|e| panic!("{} failed: {e}", self.who))
    }

    /// Stops it; panics unless it was never refused, never lost its lock
    /// and released it.
    pub(super) async fn finish(self) {
        self.stop.store(true, Ordering::SeqCst);
        let end = self.task.await.expect("the holder's task");
        let who = &self.who;
        assert!(
            end.refused.is_empty(),
            "{who} was refused while it held: {:?}",
            end.refused
        );
        assert_eq!(end.lost, None, "{who} lost its lock");
        end.released
            .unwrap_or_else(|e| panic!("{who} could not release: {e}"));
    }
}
