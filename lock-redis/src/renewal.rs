//! Batched renewals: every lease renewal of a backend goes through one
//! queue, and the renewals due within [`WINDOW`] of each other are sent as
//! one script call (per cluster slot, per Redlock master).
//!
//! lock-core renews each guard at ttl/3 on its own timer. Holding 10,000
//! locks therefore asks for 10,000 renewals per ttl/3, but they cost at
//! most one round trip per window (plus one per [`MAX_BATCH`] locks), not
//! one each. Waiting up to a window before sending is safe: lock-core
//! counts the lease from the moment it asked, which is earlier than the
//! moment the server extends it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::AcquireRequest;
use lock_core::{LockError, LossReason};
use tokio::sync::{mpsc, oneshot};

use crate::conn::{Conn, ScriptCall};
use crate::deadline::Timeouts;
use crate::keys::LockKeys;
use crate::scripts::scripts;

/// How long the first renewal of a batch waits for others to join it.
pub(crate) const WINDOW: Duration = Duration::from_millis(5);
/// The most locks renewed by one script call.
pub(crate) const MAX_BATCH: usize = 1_000;

/// One lock to renew: its Redis key and owner id.
#[derive(Clone, Debug)]
pub(crate) struct RenewItem {
    pub(crate) lock: String,
    pub(crate) owner: String,
}

/// One held lock as renewal and release see it: its Redis names, our
/// owner id and the user's key (for errors). `Debug` shows the lock's name
/// and owner.
pub(crate) struct HeldKeys {
    pub(crate) keys: LockKeys,
    pub(crate) owner: String,
    pub(crate) key: String,
}

impl HeldKeys {
    /// The names of the lock `request` asked for, held by its owner.
    pub(crate) fn new(keys: LockKeys, request: &AcquireRequest) -> Self {
        Self {
            keys,
            owner: request.owner.as_str().to_owned(),
            key: request.name.key().as_str().to_owned(),
        }
    }

    /// Renews the lock through `renewer`'s batches; [`LockError::Lost`]
    /// if it is not ours any more.
    pub(crate) async fn renew(&self, renewer: &Renewer, ttl: Duration) -> Result<(), LockError> {
        let item = RenewItem {
            lock: self.keys.lock().to_owned(),
            owner: self.owner.clone(),
        };
        self.confirm(renewer.renew(item, ttl).await?)
    }

    /// `Ok` if the server found the lock still `ours`, else
    /// [`LockError::Lost`].
    pub(crate) fn confirm(&self, ours: bool) -> Result<(), LockError> {
        if ours {
            Ok(())
        } else {
            Err(LockError::lost(
                self.key.clone(),
                LossReason::RenewalRefused,
            ))
        }
    }
}

impl fmt::Debug for HeldKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldKeys")
            .field("lock", &self.keys.lock())
            .field("owner", &self.owner)
            .finish()
    }
}

/// Where a batch of renewals goes.
#[async_trait]
pub(crate) trait RenewTarget: Send + Sync + 'static {
    /// Renews `items` to `ttl`: per item, `Ok(true)` if renewed,
    /// `Ok(false)` if the lock is no longer ours, `Err` if unknown.
    async fn renew_many(&self, ttl: Duration, items: &[RenewItem]) -> Vec<Result<bool, LockError>>;
}

struct Request {
    item: RenewItem,
    ttl: Duration,
    reply: oneshot::Sender<Result<bool, LockError>>,
}

/// The renewal queue of one backend.
#[derive(Clone)]
pub(crate) struct Renewer {
    queue: mpsc::UnboundedSender<Request>,
}

impl Renewer {
    /// Starts the queue's task, sending batches to `target`.
    pub(crate) fn start(target: impl RenewTarget) -> Self {
        let (queue, requests) = mpsc::unbounded_channel();
        tokio::spawn(run(Arc::new(target), requests));
        Self { queue }
    }

    /// Renews one lock: `Ok(true)` renewed, `Ok(false)` not ours any more.
    async fn renew(&self, item: RenewItem, ttl: Duration) -> Result<bool, LockError> {
        let (reply, outcome) = oneshot::channel();
        self.queue
            .send(Request { item, ttl, reply })
            .map_err(|_| LockError::backend("the renewal queue has stopped", "backend dropped"))?;
        outcome.await.map_err(|_| {
            LockError::backend("the renewal queue dropped a request", "backend dropped")
        })?
    }
}

/// Gathers the requests due within a [`WINDOW`] into batches and sends
/// them to `target`, until the backend is gone.
async fn run(target: Arc<dyn RenewTarget>, mut requests: mpsc::UnboundedReceiver<Request>) {
    while let Some(first) = requests.recv().await {
        tokio::time::sleep(WINDOW).await;
        let mut batch = vec![first];
        while let Ok(next) = requests.try_recv() {
            batch.push(next);
        }
        // Locks of lockers with different ttls share the backend: one call per ttl.
        batch.sort_by_key(|r| r.ttl);
        let mut calls = Vec::new();
        while !batch.is_empty() {
            let ttl = batch[0].ttl;
            let same = batch
                .iter()
                .take_while(|r| r.ttl == ttl)
                .count()
                .min(MAX_BATCH);
            let chunk: Vec<Request> = batch.drain(..same).collect();
            let target = Arc::clone(&target);
            // Chunks go out concurrently; the connection pipelines them.
            calls.push(tokio::spawn(async move {
                let items: Vec<RenewItem> = chunk.iter().map(|r| r.item.clone()).collect();
                let results = target.renew_many(ttl, &items).await;
                for (request, result) in chunk.into_iter().zip(results) {
                    let _ = request.reply.send(result);
                }
            }));
        }
        for call in calls {
            let _ = call.await;
        }
    }
}

/// Renewals on one instance or cluster.
pub(crate) struct ConnTarget {
    pub(crate) conn: Conn,
    pub(crate) timeouts: Timeouts,
}

#[async_trait]
impl RenewTarget for ConnTarget {
    async fn renew_many(&self, ttl: Duration, items: &[RenewItem]) -> Vec<Result<bool, LockError>> {
        renew_on(&self.conn, self.timeouts, ttl, items).await
    }
}

/// Renews `items` on one connection: one script call per group of keys
/// that may share a call (all, or one cluster slot), concurrently.
pub(crate) async fn renew_on(
    conn: &Conn,
    timeouts: Timeouts,
    ttl: Duration,
    items: &[RenewItem],
) -> Vec<Result<bool, LockError>> {
    let keys: Vec<&str> = items.iter().map(|i| i.lock.as_str()).collect();
    let groups = conn.script_groups(&keys);
    let ttl_ms = ttl.as_millis() as u64;
    let keys = &keys;
    let calls = groups.iter().map(|group| async move {
        let group_keys: Vec<&str> = group.iter().map(|&i| keys[i]).collect();
        let owners: Vec<&str> = group.iter().map(|&i| items[i].owner.as_str()).collect();
        let outcome: Result<Vec<i64>, LockError> = conn
            .eval(
                timeouts,
                &ScriptCall::new(
                    "renew",
                    &scripts().renew_many,
                    &group_keys,
                    &[&ttl_ms, &owners],
                )
                .idempotent(),
            )
            .await;
        (group, outcome)
    });
    let mut results: Vec<Result<bool, LockError>> = items.iter().map(|_| Ok(false)).collect();
    let done = futures_util::future::join_all(calls).await;
    for (group, outcome) in done {
        match outcome {
            Ok(flags) => {
                for (&i, flag) in group
                    .iter()
                    .zip(flags.into_iter().chain(std::iter::repeat(0)))
                {
                    results[i] = Ok(flag == 1);
                }
            }
            Err(error) => {
                for &i in group {
                    results[i] = Err(clone_error(&error));
                }
            }
        }
    }
    results
}

/// A copy of `error` for each lock of a failed batch (the source is
/// summarised in the message).
pub(crate) fn clone_error(error: &LockError) -> LockError {
    match error {
        LockError::Unavailable { message, .. } => LockError::Unavailable {
            message: message.clone(),
            source: None,
        },
        other => LockError::Backend {
            message: other.to_string(),
            source: None,
        },
    }
}
