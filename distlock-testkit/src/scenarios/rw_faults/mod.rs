//! Read-write locks under faults: a holder frozen (`SIGSTOP`) past its
//! lease in a child process is replaced by the other kind of holder; once
//! resumed it is told it lost, and the access it still makes with its old
//! token is refused by a fencing register. At no time do a reader and a
//! writer hold at once — which the register, not the test's own
//! bookkeeping, shows.
//!
//! - [`frozen_writer_is_replaced`]: a writer in a child process holds;
//!   readers of this process queue behind it (seen waiting in the store,
//!   not by sleeping); the writer is frozen past its lease; the readers
//!   get in with tokens above the writer's; the resumed writer is told it
//!   lost, and its late writes are refused.
//! - [`frozen_reader_is_replaced`]: the same with a reader in the child
//!   and a writer here; the resumed reader's fenced read-check (no writer
//!   with a higher token has written) is flagged.
//! - [`frozen_holder_is_kept`]: for a store whose locks never expire (the
//!   file store, where the kernel keeps a frozen process's `flock`), the
//!   replacement cannot happen; what must hold instead: the other kind
//!   stays out for as long as the holder is frozen, and gets in once the
//!   holder's process is gone.
//!
//! **The register** ([`RwRegister`]) is the resource the holders use,
//! each access carrying the holder's fencing token, as a storage service
//! that checks tokens would: a write is refused when a higher token has
//! been seen (a higher write, through the testkit's
//! [`FencedResource`](crate::fencing::FencedResource); or a read of a higher token, by the register's read
//! fence: that reader got the lock after the writer lost it); a read is
//! flagged when a writer with a higher token has written (the reader's
//! lock was taken by that writer). Every access is logged in order, so
//! that [`RwRegister::exclusive`] can check the spans of accepted accesses:
//! no writer's span meets another holder's, and they follow token order.
//! Because the register refuses what would overlap, an overlap shows as a
//! refusal: the scenarios accept refusals only from the frozen holder, and
//! only after it was resumed.
//!
//! **The child** is this test binary run again through
//! [`TestChild`](crate::child::TestChild), executing an ignored test of the store's test binary
//! that calls [`child_holder`]; it is told what to hold by an environment
//! variable (`MODE KEY URL`, see [`HoldMode::split`]) and reports on its
//! stdout. A store's test binary:
//!
//! ```ignore
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! #[ignore = "child process of the read-write fault tests"]
//! async fn rw_child() {
//!     rw_faults::child_holder(CHILD_VAR, |url| async move { connect(&url).await }).await;
//! }
//! ```

mod child;
mod holder;
mod register;
mod replace;

use std::future::Future;
use std::time::{Duration, Instant};

use lock_core::{HoldKind, Locker};

use crate::child::HoldMode;
use crate::{eventually, pause_group, resume_group, signal_group};
use child::{accepted_before_the_freeze, Child, Event};
use holder::Holder;

pub use child::{child_holder, ChildRun, Resumed};
pub use register::{Access, Op, RwRegister, Span};

/// How long requests may take to show as waiting in the store, and the
/// child to report.
const SHOW_WITHIN: Duration = Duration::from_secs(10);
/// How often a holder of this process uses the register.
const ACCESS_EVERY: Duration = Duration::from_millis(20);

// ------------------------------------------------------------ the store

/// What a scenario reads from a store from outside distlock.
pub trait RwStore {
    /// How many requests for lock `key` (as `Locker::name` names it in
    /// the lockers' namespace) wait in the store without holding: queue
    /// entries, nodes or rows that are not the holders'.
    fn waiting(&self, key: &str) -> impl Future<Output = Result<usize, String>>;
}

/// The store-specific set-up of the replacement scenarios.
#[derive(Debug)]
pub struct RwFaults<'a> {
    /// Lockers of this process on the child's store and namespace (two
    /// or more): the readers of [`frozen_writer_is_replaced`], the writer
    /// of [`frozen_reader_is_replaced`] (the first).
    pub lockers: &'a [Locker],
    /// The child holder.
    pub child: ChildRun<'a>,
    /// How long a frozen child's lease (or session) still runs at least
    /// after the freeze: nobody may get in sooner.
    pub lease_left: Duration,
    /// How long after the freeze the waiters may take to get in, and the
    /// resumed child to hear its loss and release.
    pub within: Duration,
    /// The loss reasons (by name, as `{:?}` writes them) the resumed
    /// child may hear.
    pub reasons: &'a [&'a str],
}

/// For an [`RwStore`] that counts a lock's records (queue entries,
/// nodes) in the store: how many of the `recorded` ones wait, that is all
/// but the holders `locker` lists for `key`. `Err` naming both counts
/// when the store lists more holders than records.
pub async fn waiting_besides_holders(
    locker: &Locker,
    key: &str,
    recorded: usize,
) -> Result<usize, String> {
    let holders = locker.holders(key).await.map_err(|e| e.to_string())?;
    recorded
        .checked_sub(holders.len())
        .ok_or_else(|| format!("{recorded} records, {} holders", holders.len()))
}

/// What a replacement scenario saw, for a store's own further checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replaced {
    /// The frozen child's token.
    pub frozen: u64,
    /// The tokens of the holders that replaced it.
    pub replacing: Vec<u64>,
    /// What the child did once resumed.
    pub resumed: Resumed,
}

/// A writer in a child process holds `key`; two readers of this process
/// queue behind it (seen waiting in `store`); the writer is frozen past
/// its lease; the readers get in, no sooner than the lease ran out, with
/// tokens above the writer's; resumed, the writer hears its loss, its
/// release finds the lock lost, and every write it made after the resume
/// was refused by the register. Panics naming the step that failed.
pub async fn frozen_writer_is_replaced(
    plan: &RwFaults<'_>,
    store: &impl RwStore,
    key: &str,
) -> Replaced {
    replace::replace_frozen(plan, store, key, HoldMode::Write).await
}

/// A reader in a child process holds `key`; a writer of this process
/// queues behind it (seen waiting in `store`); the reader is frozen past
/// its lease; the writer gets in, no sooner than the lease ran out, with a
/// token above the reader's; resumed, the reader hears its loss, its
/// release finds the lock lost, and every read-check it made after the
/// resume was flagged by the register. Panics naming the step that
/// failed.
pub async fn frozen_reader_is_replaced(
    plan: &RwFaults<'_>,
    store: &impl RwStore,
    key: &str,
) -> Replaced {
    replace::replace_frozen(plan, store, key, HoldMode::Read).await
}

/// The other kind: readers replace a writer, a writer a reader.
fn replacing_mode(frozen: HoldMode) -> HoldMode {
    match frozen {
        HoldMode::Read => HoldMode::Write,
        HoldMode::Lock | HoldMode::Write => HoldMode::Read,
    }
}

/// What a holder in `mode` is called.
fn noun(mode: HoldMode) -> &'static str {
    match mode {
        HoldMode::Lock => "holder",
        HoldMode::Read => "reader",
        HoldMode::Write => "writer",
    }
}

/// How each kind holds, as `holders` lists it.
fn kind_of(mode: HoldMode) -> HoldKind {
    match mode {
        HoldMode::Read => HoldKind::Shared,
        HoldMode::Lock | HoldMode::Write => HoldKind::Exclusive,
    }
}

/// Panics unless `lock`'s holders are exactly `tokens`, each of `kind`.
async fn holders_are(lock: &lock_core::RwLock, kind: HoldKind, tokens: &[u64], when: &str) {
    let holders = lock.holders().await.expect("list the holders");
    let mut seen: Vec<(u64, HoldKind)> = holders.iter().map(|h| (h.token.get(), h.kind)).collect();
    seen.sort_unstable_by_key(|(token, _)| *token);
    let expected: Vec<(u64, HoldKind)> = tokens.iter().map(|t| (*t, kind)).collect();
    assert_eq!(seen, expected, "the holders {when}");
}

// ------------------------------------------------------------ no expiry

/// The set-up of [`frozen_holder_is_kept`].
#[derive(Debug)]
pub struct KeptPlan<'a> {
    /// A locker of this process on the child's store and namespace.
    pub locker: &'a Locker,
    /// The child holder.
    pub child: ChildRun<'a>,
    /// How long the child stays frozen: well past the locker's ttl.
    pub frozen_for: Duration,
    /// How long the other kind may take to get in once the child is
    /// killed.
    pub within: Duration,
}

/// For a store whose locks do not expire (no
/// [`Expiry`](lock_core::backend::Capability::Expiry)): a child holds
/// `key` in `mode`; the other kind waits in this process; the child is
/// frozen for `frozen_for` and the waiter stays out all along (the holders
/// still the child alone); resumed, the child still holds and its access
/// is accepted; killed, its lock is given back by the store and the
/// waiter gets in with a higher token. The register shows no reader
/// beside a writer and refused nothing. Panics naming the step that
/// failed.
pub async fn frozen_holder_is_kept(plan: &KeptPlan<'_>, key: &str, mode: HoldMode) {
    let caps = plan.locker.capabilities();
    assert!(
        !caps.expiry,
        "the store expires locks: run the replacement scenarios"
    );
    let register = RwRegister::new();
    let mut child = Child::spawn(&plan.child, mode, key, &register).await;
    let held = child.holding(mode).await;
    let look = plan.locker.rwlock(key).expect("the lock");
    holders_are(&look, kind_of(mode), &[held], "before the freeze").await;
    let other = replacing_mode(mode);
    let wait = plan.frozen_for + plan.within + SHOW_WITHIN;
    let waiter = Holder::spawn(
        plan.locker,
        key,
        other,
        &register,
        (format!("the {}", noun(other)), wait),
    );

    pause_group(child.pid()).await.expect("freeze the child");
    let frozen_at = Instant::now();
    let beside = format!("beside the frozen child {} (token {held})", noun(mode));
    while frozen_at.elapsed() < plan.frozen_for {
        waiter.assert_out(&beside);
        tokio::time::sleep(ACCESS_EVERY).await;
    }
    waiter.assert_out(&beside);
    holders_are(&look, kind_of(mode), &[held], "the child frozen").await;
    accepted_before_the_freeze(&mut child);

    resume_group(child.pid()).expect("resume the child");
    match child.next(SHOW_WITHIN).await {
        Event::Access(op) if op.refused.is_none() && op.token == held => {}
        other => panic!("the resumed child, still holding: {other:?}"),
    }
    waiter.assert_out(&beside);

    signal_group(child.pid(), libc::SIGKILL).expect("kill the child");
    let (token, _) = waiter.granted(plan.within).await;
    assert!(
        token > held,
        "token {token} after the killed child's {held}"
    );
    holders_are(&look, kind_of(other), &[token], "the child killed").await;
    eventually(SHOW_WITHIN, "the waiter's first access", || async {
        register.ops().iter().any(|op| op.token == token)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    waiter.finish().await;
    register.exclusive().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(register.refused(), Vec::new(), "refused accesses");
}
