//! [`HolderWatch`]: the holder of one lock, as it changes.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::{Stream, StreamExt};

use crate::backend::HolderStream;
use crate::info::LockInfo;

/// The holder of one lock as it changes, pushed by the store; made by
/// [`Locker::watch`](crate::Locker::watch).
///
/// A watch reports the current state first; then states in the order they
/// happened (tokens never go back), never the same state twice in a row,
/// and the latest state always arrives. On stores whose capabilities
/// declare [`watch_every_change`](crate::backend::Capabilities::watch_every_change)
/// (memory, Redis on one instance, Cluster or Sentinel, and etcd) every
/// change is delivered; on the others (files, Redlock, ZooKeeper,
/// PostgreSQL) changes closer together than one re-read may be merged (an
/// intermediate holder may not appear).
///
/// A state is the holder (`None`: the lock is free) with its owner, token
/// and value; a change is an acquisition, a value change, a release, a
/// hand-off, a forced release or a lease running out. The fine print:
///
/// * Every change is delivered while the watch is connected and keeps up.
///   A watch cut off from its store reads again once it is back and goes
///   on from the state then, so changes that began and ended meanwhile are
///   not seen (etcd resumes without a gap unless the history it needs was
///   compacted; a Redis Cluster failover can lose messages without a
///   disconnect, caught up within 10 s); so does a watch more than 1,024
///   states behind (memory, Redis).
/// * A lease running out is delivered like any change on memory and etcd.
///   Redis announces nothing when a key expires: the watch reads again at
///   the lease's end, and a new holder that takes the lock before that
///   read hides the free state in between.
/// * The latest state arrives once the store can be reached; tokens never
///   go back while the store keeps its counters (see each store's fencing
///   notes) and the namespace is not purged
///   ([`Locker::purge_namespace`](crate::Locker::purge_namespace) starts
///   its tokens again).
///
/// The stream never ends by itself: while the store is unreachable it waits
/// (and logs through `tracing`). Dropping it cancels every watch it set in
/// the store.
///
/// ```
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// let locks = lock_core::Locker::memory("watch-docs")?;
/// let mut holders = locks.watch("jobs/nightly")?;
/// assert!(holders.changed().await.is_none()); // free
/// let guard = locks.lock_with("jobs/nightly", lock_core::LockOptions::new().value("host-a")).await?;
/// let holder = holders.changed().await.expect("held");
/// assert_eq!((holder.token, holder.value.as_str()), (guard.token(), "host-a"));
/// guard.release().await?;
/// assert!(holders.changed().await.is_none());
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
pub struct HolderWatch {
    key: String,
    inner: HolderStream,
    last: Option<Option<LockInfo>>,
}

impl HolderWatch {
    pub(crate) fn new(key: String, inner: HolderStream) -> Self {
        Self {
            key,
            inner,
            last: None,
        }
    }

    /// The key watched.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The next state: the current holder on the first call, then the
    /// holder after the next change. Waits as long as it takes.
    pub async fn changed(&mut self) -> Option<LockInfo> {
        match self.next().await {
            Some(state) => state,
            // The store's stream ended, which none does; wait forever like a
            // watch with nothing left to report.
            None => std::future::pending().await,
        }
    }

    fn is_repeat(&self, state: &Option<LockInfo>) -> bool {
        match (&self.last, state) {
            (Some(None), None) => true,
            (Some(Some(last)), Some(now)) => last.same_state(now),
            _ => false,
        }
    }
}

impl Stream for HolderWatch {
    type Item = Option<LockInfo>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let state = match self.inner.poll_next_unpin(cx) {
                Poll::Ready(Some(state)) => state,
                other => return other,
            };
            if !self.is_repeat(&state) {
                self.last = Some(state.clone());
                return Poll::Ready(Some(state));
            }
        }
    }
}

impl fmt::Debug for HolderWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HolderWatch")
            .field("key", &self.key)
            .field("last", &self.last)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::FencingToken;

    fn holder(token: u64, value: &str, ttl_ms: u64) -> Option<LockInfo> {
        let ttl = Some(std::time::Duration::from_millis(ttl_ms));
        Some(LockInfo::new("owner", FencingToken::new(token), ttl).with_value(value))
    }

    #[tokio::test]
    async fn repeats_are_dropped_and_changes_kept_in_order() {
        let states = vec![
            None,
            None,
            holder(1, "a", 900),
            holder(1, "a", 500), // only the time left differs
            holder(1, "b", 400),
            None,
            holder(2, "b", 900),
        ];
        let inner: HolderStream = Box::pin(futures_util::stream::iter(states));
        let seen: Vec<_> = HolderWatch::new("k".into(), inner).collect().await;
        let tokens_and_values: Vec<_> = seen
            .iter()
            .map(|s| s.as_ref().map(|h| (h.token.get(), h.value.clone())))
            .collect();
        assert_eq!(
            tokens_and_values,
            vec![
                None,
                Some((1, "a".to_owned())),
                Some((1, "b".to_owned())),
                None,
                Some((2, "b".to_owned())),
            ]
        );
    }
}
