//! What a store implements, and the machinery it may reuse.
//!
//! Application code never needs this module: it takes locks through
//! [`Locker`](crate::Locker). A store crate implements [`Backend`] (and
//! [`HeldLock`] for the locks it hands out) and plugs into `connect`
//! through [`Store`]; its URL is read with [`crate::url`].
//!
//! Machinery shared by every store lives here too: the retry loop for
//! stores that can only "try" ([`acquire_with_retries`]), per-key wake-ups
//! ([`WakeRegistry`]), [`Backoff`] policies for retrying transient errors,
//! clean-up that survives a dropped future ([`CleanupOnDrop`],
//! [`spawn_detached`]) and the attempts that wait for it ([`Leaving`]), the loss channel ([`loss_channel`]), a due-ordered
//! queue of delayed work ([`DueQueue`]), the margin a lease keeps for
//! clock drift ([`clock_drift`]), and finding out why a connection failed
//! ([`diagnose`]: the host, what failed and what to try, in words every
//! store shares).
//!
//! # Contract
//!
//! A backend implements only what differs between stores. lock-core does
//! the rest: key validation, namespaces, deadlines, renewal timing, the
//! lost signal, background release on drop and tracing.
//!
//! * [`Backend::acquire`] takes one lock. With [`WaitMode::Try`] it makes a
//!   single attempt and returns `Ok(None)` if the lock is held; otherwise it
//!   waits (driven by store notifications where the store has them) until
//!   it holds the lock. lock-core enforces the caller's deadline by dropping
//!   the future, so **`acquire` must be cancel-safe**: a dropped call must
//!   leave nothing behind that blocks later acquirers (a queue entry, a key
//!   whose reply was lost). [`CleanupOnDrop`] and [`spawn_cleanup`] help:
//!   when the deadline is what dropped the call, lock-core waits for the
//!   clean-ups they started (up to [`ABANDONED_CLEANUP_GRACE`]) before it
//!   reports the timeout, so the caller never hears "timed out" while its
//!   entry still stands in the queue.
//! * The returned [`Acquired`] says how the lease stays alive
//!   ([`Renewal`]) and carries a [`HeldLock`] through which lock-core
//!   renews and releases it.
//! * Release and renewal compare ownership in the store: they never touch a
//!   lock that is no longer ours, and report [`LockError::Lost`] instead.
//! * A backend that learns of a loss by itself (session expired, node
//!   deleted) calls [`LossReporter::report`] on the request's reporter.
//! * The holder's value ([`AcquireRequest::value`],
//!   [`HeldLock::set_value`]) is stored with the lock and reported by
//!   [`Backend::inspect`] and [`Backend::watch`].
//! * [`AcquireRequest::kind`] says what to take: the name's lock alone, a
//!   shared (read) hold of it, or one of its semaphore's permits. lock-core
//!   sends the last two only to stores whose [`Capabilities`] declare
//!   [`shared_locks`](Capabilities::shared_locks) or
//!   [`semaphores`](Capabilities::semaphores); such stores also list every
//!   holder in [`Backend::holders`]. Tokens of a name's lock (plain, read
//!   and write holds alike) come from one counter, its semaphore's from
//!   another.
//! * [`Backend::watch`] is pushed by the store's notifications, never a
//!   polling loop where the store can notify; [`holder_stream`] is the
//!   shared loop around a store's [`HolderSource`]. A store declares
//!   [`Capabilities::watch_every_change`] only if its watch reports every
//!   change as a state of its own (notifications that carry the state,
//!   [`Change::Holder`]), not a re-read that may merge changes.

mod backoff;
pub mod diagnose;
mod due_queue;
mod holder_data;
mod leaving;
mod spawn;
mod store;
mod wait;
mod watch;

use std::fmt;
use std::time::{Duration, Instant};

use crate::error::LockError;
pub use crate::info::HoldKind;
use crate::info::LockInfo;
use crate::key::{LockName, Namespace};
use crate::owner::OwnerId;
pub use crate::taking::Taking;
use crate::token::FencingToken;

pub use crate::error::BoxError;
pub use crate::loss::{loss_channel, LossReporter};
/// Re-exported so store crates and the conformance macro name one version.
pub use async_trait::async_trait;
pub use backoff::{Backoff, Delays};
pub use due_queue::DueQueue;
pub use holder_data::{holder_data, holder_from_data};
pub use leaving::{Leaving, Pending};
pub(crate) use spawn::AcquisitionCleanups;
pub use spawn::{spawn_cleanup, spawn_detached, CleanupOnDrop, ABANDONED_CLEANUP_GRACE};
pub use store::Store;
pub use wait::{acquire_with_retries, Attempt, TryAcquire, WakeRegistry, WakeSubscription};
pub use watch::{holder_stream, Change, HolderSource, HolderStream};

/// A lock store. Object-safe; a [`Locker`](crate::Locker) holds one as
/// `Arc<dyn Backend>`.
///
/// `Debug` must not print credentials.
#[async_trait]
pub trait Backend: Send + Sync + fmt::Debug + 'static {
    /// This backend's short lowercase name: the `store` label of its
    /// metrics, the `backend` field of its traces, the store named in
    /// [`LockError::NotSupported`] and [`Locker::backend_name`](crate::Locker::backend_name)
    /// (`mem`, `file`, `redis`, `redis-cluster`, `redis-sentinel`,
    /// `redlock`, `etcd`, `zookeeper`). It names the opened backend, so one store may have
    /// several; [`Store::NAME`] is the kind of store's name in messages
    /// about its URLs.
    fn name(&self) -> &'static str;

    /// What this backend can do; the conformance suite picks cases by it.
    fn capabilities(&self) -> Capabilities;

    /// Takes the lock described by `request`; see the module docs for the
    /// contract. `Ok(None)` only for [`WaitMode::Try`] when the lock is held,
    /// or when a wait ended at its deadline.
    async fn acquire(&self, request: &AcquireRequest) -> Result<Option<Acquired>, LockError>;

    /// Who holds `name` now (with the holder's value), or `None` if it is
    /// free. Where readers hold the lock, one of them (stores with
    /// [`Capabilities::shared_locks`]).
    async fn inspect(&self, name: &LockName) -> Result<Option<LockInfo>, LockError>;

    /// Every holder of `name`'s lock (the exclusive holder, or every
    /// reader) or, for [`Primitive::Semaphore`], of its semaphore's
    /// permits, in the order they took it where the store knows it.
    ///
    /// The default serves stores with exclusive locks only: the lock's
    /// holder from [`inspect`](Self::inspect), and
    /// [`LockError::NotSupported`] for semaphores.
    async fn holders(
        &self,
        name: &LockName,
        primitive: Primitive,
    ) -> Result<Vec<LockInfo>, LockError> {
        match primitive {
            Primitive::Lock => Ok(self.inspect(name).await?.into_iter().collect()),
            Primitive::Semaphore => Err(LockError::not_supported(self.name(), "semaphores")),
        }
    }

    /// The holder of `name` now and after changes, pushed by the store;
    /// see [`HolderStream`] and, for what a watch guarantees,
    /// [`HolderWatch`](crate::HolderWatch). Nothing is sent to the store
    /// until the stream is first polled; dropping the stream cancels what
    /// it set up.
    fn watch(&self, name: &LockName) -> HolderStream;

    /// Removes the lock `name` whoever holds it (an operator's override);
    /// the holder's guard reports [`LossReason::TakenAway`](crate::LossReason)
    /// once its backend notices. Returns whether a lock was removed.
    ///
    /// The default refuses with [`LockError::NotSupported`]; backends that
    /// support it set [`Capabilities::force_release`].
    async fn force_release(&self, name: &LockName) -> Result<bool, LockError> {
        let _ = name;
        Err(LockError::not_supported(
            self.name(),
            "removing another owner's lock",
        ))
    }

    /// Removes everything the store keeps for `namespace`: holds, waiters,
    /// stored limits, fencing counters and the containers they live in,
    /// so that a namespace made for a test, a `distlock check` or a
    /// benchmark leaves nothing behind. Holders in the namespace lose
    /// their locks (their guards report it once the backend notices), and
    /// its fencing tokens may start again from the bottom: use it only on
    /// a namespace no process uses any more. Other namespaces are not
    /// touched. Removing a namespace that holds nothing succeeds.
    ///
    /// The default refuses with [`LockError::NotSupported`].
    async fn purge_namespace(&self, namespace: &Namespace) -> Result<(), LockError> {
        let _ = namespace;
        Err(LockError::not_supported(
            self.name(),
            "removing a whole namespace",
        ))
    }
}

/// Declares [`Capabilities`] (a `bool` field per capability),
/// [`Capability`] (a variant per field) and [`Capabilities::of`] from one
/// list, `field: Variant` each, so the three cannot drift apart.
macro_rules! capabilities {
    ($($(#[doc = $doc:literal])* $field:ident: $variant:ident,)+) => {
        /// What a backend can do, as read by the conformance suite and by
        /// [`Locker::capabilities`](crate::Locker::capabilities). Built in one
        /// expression from the list of what applies:
        ///
        /// ```
        /// use lock_core::backend::{Capabilities, Capability::*};
        /// let caps = Capabilities::of(&[Expiry, Fifo, Remote]);
        /// assert!(caps.fifo && !caps.force_release);
        /// assert_eq!(Capabilities::default(), Capabilities::of(&[]));
        /// ```
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct Capabilities {
            $($(#[doc = $doc])* pub $field: bool,)+
        }

        /// One thing a backend can do; see the field of the same name in
        /// [`Capabilities`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Capability {
            $(#[doc = concat!("[`Capabilities::", stringify!($field), "`].")] $variant,)+
        }

        impl Capabilities {
            /// Exactly the capabilities in `list`.
            pub const fn of(list: &[Capability]) -> Self {
                Self { $($field: false,)+ }.with(list)
            }

            /// These capabilities and those in `list`.
            pub const fn with(mut self, list: &[Capability]) -> Self {
                let mut i = 0;
                while i < list.len() {
                    match list[i] {
                        $(Capability::$variant => self.$field = true,)+
                    }
                    i += 1;
                }
                self
            }
        }
    };
}

capabilities! {
    /// Locks of a holder that vanished (crashed, partitioned) are freed by
    /// the store after the ttl.
    expiry: Expiry,
    /// Each lock has its own lease: a guard that stops renewing
    /// ([`LockOptions::auto_renew`](crate::LockOptions::auto_renew) off, or
    /// [`LockGuard::leak`](crate::LockGuard::leak)) expires after the ttl
    /// even while its locker lives.
    per_lock_expiry: PerLockExpiry,
    /// [`Backend::force_release`] is supported.
    force_release: ForceRelease,
    /// Waiters are woken by the store when a lock is released (not by
    /// polling), across processes.
    notified_wakeups: NotifiedWakeups,
    /// Waiters get the lock in the order they asked for it.
    fifo: Fifo,
    /// The store is reached over a network and can become unreachable.
    remote: Remote,
    /// Read locks ([`HoldKind::Shared`]) share a name's lock with each
    /// other and never with an exclusive holder, and a waiting exclusive
    /// request is not overtaken by read requests made after it.
    shared_locks: SharedLocks,
    /// Semaphores ([`HoldKind::Permit`]): at most `limit` permits held at
    /// once.
    semaphores: Semaphores,
    /// A semaphore's limit is stored with it: a request under another
    /// limit while permits are held fails with
    /// [`LockError::LimitMismatch`].
    /// Without it (a layout shared with a client family that stores no
    /// limit), the clients of a semaphore must agree on its limit.
    stored_limits: StoredLimits,
    /// A watch ([`Locker::watch`](crate::Locker::watch),
    /// [`Election::observe`](crate::Election::observe)) delivers every
    /// change: each acquisition, value change, release, hand-off and
    /// forced release of the lock reaches it as a state of its own, in
    /// the order the store made them, while the watch is connected and
    /// keeps up. Without this flag a store's notification only says that
    /// something changed, the watch reads the holder again, and changes
    /// closer together than one re-read may be merged (an intermediate
    /// holder may not appear). What every store guarantees, and the fine
    /// print, is in [`HolderWatch`](crate::HolderWatch).
    watch_every_change: WatchEveryChange,
    /// The locker's namespace is part of where each key lives in the
    /// store: the same key in two namespaces is two locks, and
    /// [`Backend::purge_namespace`] (where supported) removes one
    /// namespace's state. Every store has it in its own layout; a layout
    /// shared with another client family (whose keys are exactly the
    /// names that family uses) does not.
    namespaced_keys: NamespacedKeys,
}

impl Capabilities {
    /// What a store offers that keeps its own queue of waiters for every
    /// primitive: keys kept apart per namespace, locks freed after their
    /// holder vanishes, forced releases, waiters woken by the store in the
    /// order they asked, read locks and semaphores with stored limits. The
    /// in-memory store is this with
    /// [`PerLockExpiry`](Capability::PerLockExpiry); etcd and ZooKeeper
    /// (whose locks live as long as a session) are this with
    /// [`Remote`](Capability::Remote); Redis is this with both.
    ///
    /// ```
    /// use lock_core::backend::Capabilities;
    /// let caps = Capabilities::QUEUEING_STORE;
    /// assert!(caps.expiry && caps.force_release && caps.notified_wakeups && caps.fifo);
    /// assert!(caps.shared_locks && caps.semaphores && caps.stored_limits);
    /// assert!(caps.namespaced_keys);
    /// assert!(!caps.per_lock_expiry && !caps.remote);
    /// ```
    pub const QUEUEING_STORE: Self = Self::of(&[
        Capability::NamespacedKeys,
        Capability::Expiry,
        Capability::ForceRelease,
        Capability::NotifiedWakeups,
        Capability::Fifo,
        Capability::SharedLocks,
        Capability::Semaphores,
        Capability::StoredLimits,
    ]);
}

/// Which object of a name [`Backend::holders`] lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Primitive {
    /// The name's lock: its exclusive holder or its readers.
    Lock,
    /// The name's semaphore: its permit holders.
    Semaphore,
}

/// How long an acquire call may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// One attempt, no waiting.
    Try,
    /// Wait until this instant at most.
    Until(Instant),
    /// Wait until the lock is free.
    Forever,
}

impl WaitMode {
    /// The instant the wait ends, if any.
    pub fn deadline(self) -> Option<Instant> {
        match self {
            Self::Until(deadline) => Some(deadline),
            Self::Try | Self::Forever => None,
        }
    }

    /// False for [`WaitMode::Try`].
    pub fn may_wait(self) -> bool {
        !matches!(self, Self::Try)
    }
}

/// One request to take a lock, built by lock-core.
#[derive(Debug)]
pub struct AcquireRequest {
    /// The lock's namespace and key, validated.
    pub name: LockName,
    /// A fresh owner id for this acquisition.
    pub owner: OwnerId,
    /// The lease length.
    pub ttl: Duration,
    /// How long the call may wait.
    pub wait: WaitMode,
    /// The value to store with the lock (empty: none); at most
    /// [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN) bytes, checked by lock-core.
    pub value: String,
    /// What to take: the name's lock alone, a shared (read) hold of it, or
    /// one of its semaphore's permits. lock-core sends
    /// [`HoldKind::Shared`] only to stores with
    /// [`Capabilities::shared_locks`] and [`HoldKind::Permit`] (with a
    /// limit of 1 to [`MAX_SEMAPHORE_LIMIT`](crate::MAX_SEMAPHORE_LIMIT))
    /// only to stores with [`Capabilities::semaphores`].
    pub kind: HoldKind,
    /// How the API was called (a lock, a write lock, a leadership, ...);
    /// `kind` is always `taking.hold_kind()`. Only stores laid out as
    /// another client family's recipes need more than `kind`.
    pub taking: Taking,
    /// Report the loss of the lock here once acquired.
    pub loss: LossReporter,
}

/// A lock the backend has taken.
#[derive(Debug)]
pub struct Acquired {
    /// The lock's fencing token.
    pub token: FencingToken,
    /// When the request that took the lock was sent; the lease is counted
    /// from here, so the validity window errs on the safe side.
    pub requested_at: Instant,
    /// How the lease stays alive.
    pub renewal: Renewal,
    /// Renews and releases this lock.
    pub held: Box<dyn HeldLock>,
}

/// How a held lock's lease stays alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// The lease expires after the ttl. lock-core renews it at ttl/3
    /// through [`HeldLock::renew`] and reports the lock lost when a renewal
    /// is refused or when the validity window (last successful renewal's
    /// send time + ttl − drift) closes without one.
    Lease,
    /// The backend keeps the lock alive (a session or shared lease) and
    /// reports its loss itself.
    Managed,
    /// The lock never expires; lock-core calls [`HeldLock::renew`] every
    /// `interval` only to check it still stands (for example that the lock
    /// file was not removed).
    Check {
        /// How often to check.
        interval: Duration,
    },
}

/// The margin kept off a lease's validity for clock drift between this
/// process and the store: 1 % of the ttl plus 2 ms.
pub fn clock_drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// Renews and releases one held lock. Dropping it without `release` must
/// not block; it may release synchronously where the store allows (closing
/// a file) and otherwise leaves the lock to expire.
#[async_trait]
pub trait HeldLock: Send + Sync + fmt::Debug {
    /// Extends the lease to `ttl` from now (or, for [`Renewal::Check`] and
    /// [`Renewal::Managed`], checks that the lock still stands). Returns
    /// [`LockError::Lost`] if the store says the lock is not ours any more.
    async fn renew(&self, ttl: Duration) -> Result<(), LockError>;

    /// Releases the lock if it is still ours; otherwise touches nothing and
    /// returns [`LockError::Lost`]. Wakes waiters.
    async fn release(&self) -> Result<(), LockError>;

    /// Replaces the value stored with the lock if the lock is still ours
    /// (otherwise touches nothing and returns [`LockError::Lost`]), and
    /// tells the lock's watchers. The value was checked by lock-core.
    async fn set_value(&self, value: &str) -> Result<(), LockError>;

    /// For [`Renewal::Managed`]: until when the store surely keeps the lock
    /// (a session lease's last confirmed renewal, counted from when it was
    /// sent, plus its ttl minus drift), if the backend knows. Once it has
    /// passed, the guard says the lock is lost even before the backend's
    /// own timer reports it (a process frozen past its lease runs again
    /// before its timers). `None` (the default): only the backend reports.
    fn valid_until(&self) -> Option<Instant> {
        None
    }
}
