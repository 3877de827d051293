//! Watching a lock's holder: the stream a store hands lock-core
//! ([`HolderStream`]) and the shared loop that builds one from a store's
//! read and its notifications ([`holder_stream`]).
//!
//! A store implements [`HolderSource`]: `read` arms the store's
//! notification and then reads the holder (so no change slips in between),
//! `next_change` waits for the store to push something. Stores whose
//! notification carries the new state (an etcd watch event, a Redis
//! message naming the new holder, the memory store's queue) return it as
//! [`Change::Holder`], so no change is skipped, and declare
//! [`Capabilities::watch_every_change`](super::Capabilities::watch_every_change).
//! Stores whose notification only says "something changed" (a ZooKeeper
//! watch, inotify, a PostgreSQL `NOTIFY`, a Redlock master's message)
//! return [`Change::Reread`]; the read that follows reports the state as
//! it is then, so changes closer together than one re-read are merged
//! (an intermediate holder may not appear), and they do not declare it.
//! Either way the latest state always arrives: every notification is
//! followed by a state at least as new as the change behind it.
//!
//! Errors never end the stream: the loop logs them, waits (exponential
//! backoff from 50 ms to 2 s), and reads again, so after a reconnect the
//! stream resumes with the current state. Dropping the stream drops the
//! source, which must cancel everything it set in the store.

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::Stream;

use super::backoff::{Backoff, Delays};
use crate::error::LockError;
use crate::info::LockInfo;

/// The states of one lock's holder, as a store observes them: the current
/// holder first, then the holder after changes, in order (after each
/// change on stores that declare
/// [`watch_every_change`](super::Capabilities::watch_every_change)). May
/// repeat a state; [`Locker::watch`](crate::Locker::watch) drops repeats.
pub type HolderStream = Pin<Box<dyn Stream<Item = Option<LockInfo>> + Send>>;

/// What a store's notification said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The holder after one change, as the notification told it.
    Holder(Option<LockInfo>),
    /// Something may have changed: read the holder again.
    Reread,
}

/// One store watch of one lock; see the module docs.
#[async_trait]
pub trait HolderSource: Send + 'static {
    /// Sets up (or re-arms) the store's notification for this lock, then
    /// reads its holder. Called first, after every [`Change::Reread`], and
    /// after every error.
    async fn read(&mut self) -> Result<Option<LockInfo>, LockError>;

    /// Waits for the next change after the last `read` or change. Must
    /// return within the holder's remaining lease on stores whose expiry
    /// publishes nothing (return [`Change::Reread`] then).
    async fn next_change(&mut self) -> Result<Change, LockError>;
}

/// The retry policy after a watch error: 50 ms doubling to 2 s.
fn retry_policy() -> Backoff {
    Backoff::exponential(Duration::from_millis(50), Duration::from_secs(2)).with_jitter()
}

struct Driver<S> {
    source: S,
    read_next: bool,
    retries: Delays,
}

impl<S: HolderSource> Driver<S> {
    async fn next(&mut self) -> Option<LockInfo> {
        loop {
            let step = if self.read_next {
                self.source.read().await.map(Some)
            } else {
                match self.source.next_change().await {
                    Ok(Change::Holder(holder)) => Ok(Some(holder)),
                    Ok(Change::Reread) => Ok(None),
                    Err(error) => Err(error),
                }
            };
            match step {
                Ok(Some(holder)) => {
                    self.read_next = false;
                    self.retries = retry_policy().delays();
                    return holder;
                }
                Ok(None) => self.read_next = true,
                Err(error) => {
                    tracing::warn!(%error, "distlock: watch interrupted; reading the holder again");
                    self.read_next = true;
                    let delay = self.retries.next().unwrap_or(Duration::from_secs(2));
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
}

/// The stream of `source`'s holder states; see the module docs.
pub fn holder_stream(source: impl HolderSource) -> HolderStream {
    let driver = Driver {
        source,
        read_next: true,
        retries: retry_policy().delays(),
    };
    Box::pin(futures_util::stream::unfold(
        driver,
        |mut driver| async move {
            let holder = driver.next().await;
            Some((holder, driver))
        },
    ))
}
