//! Leader election on top of a lock: [`Election`], [`Leadership`],
//! [`LeaderInfo`] and [`LeaderWatch`].
//!
//! The leader is the holder of the election's lock, so an election has the
//! lock's guarantees: at most one leader whose lease is valid, a term (the
//! fencing token) strictly greater than every earlier leader's, a lost
//! signal before anyone else can lead, candidates served in the store's
//! queue order, and hand-over on resign through the store's notification.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::{Stream, StreamExt};

use crate::error::LockError;
use crate::guard::LockGuard;
use crate::info::LockInfo;
use crate::locker_core::LockerCore;
use crate::loss::LossSignal;
use crate::loss_reason::LossReason;
use crate::options::LockOptions;
use crate::owner::OwnerId;
use crate::taking::Taking;
use crate::token::FencingToken;
use crate::watch::HolderWatch;

/// One leader election, made by [`Locker::election`](crate::Locker::election).
///
/// ```
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// let locks = lock_core::Locker::memory("election-docs")?;
/// let election = locks.election("scheduler")?;
/// let mut leaders = election.observe();
/// assert!(leaders.changed().await.is_none());
///
/// let leader = election.campaign("10.0.0.7:8080").await?; // waits its turn
/// assert_eq!(leaders.changed().await.unwrap().term, leader.term());
/// leader.proclaim("10.0.0.7:9090").await?;                 // new value, same term
/// assert_eq!(election.leader().await?.unwrap().value, "10.0.0.7:9090");
/// leader.resign().await?;                                  // the next candidate leads
/// assert!(election.leader().await?.is_none());
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
#[derive(Clone)]
pub struct Election {
    core: LockerCore,
    name: String,
}

impl Election {
    pub(crate) fn new(core: LockerCore, name: String) -> Self {
        Self { core, name }
    }

    /// The election's name (a lock key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits to become leader (as long as the locker's default wait, forever
    /// unless configured), then leads with `value` (UTF-8, at most
    /// [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN) bytes) until resigning,
    /// dropping the [`Leadership`], or losing it. Candidates are served in
    /// the store's queue order. Cancelling the call leaves nothing that
    /// blocks other candidates.
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership, LockError> {
        self.campaign_with(value, LockOptions::new()).await
    }

    /// [`campaign`](Self::campaign) with per-call options (a wait limit:
    /// [`LockError::Timeout`] when it runs out). The value given here
    /// replaces any value in `options`.
    pub async fn campaign_with(
        &self,
        value: impl Into<String>,
        options: LockOptions,
    ) -> Result<Leadership, LockError> {
        let guard = self
            .core
            .take(&self.name, options.value(value), Taking::Leader)
            .await?;
        Ok(Leadership { guard })
    }

    /// The current leader, or `None` if nobody leads.
    pub async fn leader(&self) -> Result<Option<LeaderInfo>, LockError> {
        Ok(self.core.inspect(&self.name).await?.map(LeaderInfo::from))
    }

    /// The leader now and as it changes (a new leader, a proclaimed
    /// value, nobody leading), pushed by the store; see [`LeaderWatch`].
    ///
    /// A watch reports the current state first; then states in the order
    /// they happened (tokens never go back), never the same state twice in
    /// a row, and the latest state always arrives. On stores whose
    /// capabilities declare
    /// [`watch_every_change`](crate::backend::Capabilities::watch_every_change)
    /// (memory, Redis on one instance, Cluster or Sentinel, and etcd) every
    /// change is delivered; on the others (files, Redlock, ZooKeeper,
    /// PostgreSQL) changes closer together than one re-read may be merged
    /// (an intermediate holder may not appear).
    pub fn observe(&self) -> LeaderWatch {
        let watch = self
            .core
            .watch(&self.name)
            .expect("the election's name was checked when it was made");
        LeaderWatch { inner: watch }
    }
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .field("locker", &self.core)
            .finish()
    }
}

/// Being the leader of an [`Election`]. Dropping it resigns in the
/// background.
#[must_use = "dropping the leadership resigns at once"]
#[derive(Debug)]
pub struct Leadership {
    guard: LockGuard,
}

impl Leadership {
    /// The term: strictly greater than every earlier leader's. Send it with
    /// every write made as leader; the resource rejects older terms.
    pub fn term(&self) -> FencingToken {
        self.guard.token()
    }

    /// The value this leader proclaims.
    pub fn value(&self) -> String {
        self.guard.value()
    }

    /// This leader's owner id.
    pub fn owner(&self) -> &OwnerId {
        self.guard.owner()
    }

    /// False once the leadership is known to be lost.
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// Resolves when the leadership is lost, with the reason, before
    /// another candidate can lead where the store allows knowing that (see
    /// [`LockGuard::lost`]).
    pub async fn lost(&self) -> LossReason {
        self.guard.lost().await
    }

    /// A `'static` handle on the lost signal, to move into other tasks.
    pub fn loss_signal(&self) -> LossSignal {
        self.guard.loss_signal()
    }

    /// Replaces the leader's value, keeping the leadership and the term;
    /// [`Election::leader`] and observers see it. Fails with
    /// [`LockError::Lost`] if the leadership is gone.
    pub async fn proclaim(&self, value: impl Into<String>) -> Result<(), LockError> {
        self.guard.set_value(value).await
    }

    /// Renews the leader's lease now (renewal also runs by itself).
    pub async fn extend(&self) -> Result<(), LockError> {
        self.guard.extend().await
    }

    /// Steps down: the next candidate leads at once. Returns
    /// [`LockError::Lost`] if the leadership had been lost before.
    pub async fn resign(self) -> Result<(), LockError> {
        self.guard.release().await
    }

    /// The lock guard behind this leadership.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// The lock guard behind this leadership, to keep or give up as a lock
    /// ([`LockGuard::leak`] stops renewing as a crashed leader would).
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }
}

/// Who leads an election, as reported by [`Election::leader`] and
/// [`Election::observe`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// The value the leader proclaims.
    pub value: String,
    /// The leader's term (its fencing token).
    pub term: FencingToken,
    /// The leader's owner id.
    pub owner: String,
}

impl From<LockInfo> for LeaderInfo {
    fn from(info: LockInfo) -> Self {
        Self {
            value: info.value,
            term: info.token,
            owner: info.owner,
        }
    }
}

/// The leader of an election as it changes (`None`: nobody leads), with
/// the guarantees of [`HolderWatch`] (and its fine print): the election's
/// lock watched. Made by [`Election::observe`].
///
/// A watch reports the current state first; then states in the order
/// they happened (tokens never go back), never the same state twice in
/// a row, and the latest state always arrives. On stores whose
/// capabilities declare
/// [`watch_every_change`](crate::backend::Capabilities::watch_every_change)
/// (memory, Redis on one instance, Cluster or Sentinel, and etcd) every
/// change is delivered; on the others (files, Redlock, ZooKeeper,
/// PostgreSQL) changes closer together than one re-read may be merged
/// (an intermediate holder may not appear).
#[derive(Debug)]
pub struct LeaderWatch {
    inner: HolderWatch,
}

impl LeaderWatch {
    /// The next state: the current leader on the first call, then the
    /// leader after the next change.
    pub async fn changed(&mut self) -> Option<LeaderInfo> {
        self.inner.changed().await.map(LeaderInfo::from)
    }
}

impl Stream for LeaderWatch {
    type Item = Option<LeaderInfo>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner
            .poll_next_unpin(cx)
            .map(|state| state.map(|holder| holder.map(LeaderInfo::from)))
    }
}
