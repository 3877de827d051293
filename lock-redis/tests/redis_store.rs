//! Redis behaviour beyond the conformance suite, on one real
//! `redis-server` shared by the tests of this binary (and a 3-master
//! cluster for the keys test): the flags the store declares, how a
//! release hands the lock to the waiter in line, what happens to places in
//! line whose waiter vanished, stalled or gave up, and keys with braces on
//! a cluster. Lock keys and queues are looked at with a raw connection,
//! where the testkit's `layout` says they are.

mod common;

use common::{connect, holder_of, raw_redis};
use distlock_testkit::layout::RedisKeys;
use distlock_testkit::redis::{shared_cluster_url, shared_redis_url};
use distlock_testkit::with_query;
use lock_core::{LockGuard, LockOptions, Locker};

/// The flags the suite picks cases by: a Redis lock expires on its own,
/// can be broken by an operator, wakes waiters across processes and hands
/// itself to its waiters in order; it has read locks and semaphores.
#[tokio::test]
async fn redis_declares_its_capabilities() {
    let locker = connect(&shared_redis_url().await.unwrap()).await.unwrap();
    let caps = locker.capabilities();
    assert!(
        caps.expiry
            && caps.per_lock_expiry
            && caps.force_release
            && caps.notified_wakeups
            && caps.remote
            && caps.fifo
            && caps.shared_locks
            && caps.semaphores
            && caps.watch_every_change
    );
}

/// The owner ids in line for `key` in `locker`'s namespace, in order,
/// without the places already given up.
async fn waiters_in_line(
    raw: &mut ::redis::aio::MultiplexedConnection,
    locker: &Locker,
    key: &str,
) -> Vec<String> {
    let name = locker.name(key).unwrap();
    distlock_testkit::redis::waiters_in_line(raw, &name)
        .await
        .unwrap()
}

/// Waits until `key` has `n` waiters in line.
async fn until_in_line(locker: &Locker, key: &str, n: usize) {
    let mut raw = raw_redis().await;
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while waiters_in_line(&mut raw, locker, key).await.len() < n {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{n} waiters never queued"));
}

/// `N` lockers on the suite's server in `namespace` with a 10 s ttl, each
/// with its own connection: a hand-off that went astray would show as a
/// wait of that length.
async fn lockers_in<const N: usize>(namespace: &str) -> [Locker; N] {
    lockers(&format!("ttl=10s&namespace={namespace}")).await.1
}

/// The shared server's URL with `query`, and `N` lockers on it, each with
/// its own connection.
async fn lockers<const N: usize>(query: &str) -> (String, [Locker; N]) {
    let url = with_query(&shared_redis_url().await.unwrap(), query);
    let mut lockers = Vec::with_capacity(N);
    for _ in 0..N {
        lockers.push(connect(&url).await.unwrap());
    }
    let lockers = lockers.try_into().unwrap_or_else(|_| unreachable!());
    (url, lockers)
}

/// Puts a place for `owner` at the back of `key`'s line, as a waiter
/// that then vanished would have left it: live until `deadline_ms`
/// (server clock), to be handed a lease of `lease_ms`.
async fn plant_waiter(locker: &Locker, key: &str, owner: &str, deadline_ms: u64, lease_ms: u64) {
    let keys = RedisKeys::of(&locker.name(key).unwrap());
    let mut raw = raw_redis().await;
    let () = ::redis::pipe()
        .cmd("HSET")
        .arg(&keys.waiters)
        .arg(owner)
        .arg(format!("{deadline_ms} {lease_ms} distlock:grants:{owner}"))
        .ignore()
        .cmd("RPUSH")
        .arg(&keys.queue)
        .arg(owner)
        .ignore()
        .query_async(&mut raw)
        .await
        .unwrap();
}

/// Key `k` in `namespace`, held by a first locker, with the place of a
/// vanished waiter `ghost` planted in line (see [`plant_waiter`]) and a
/// second locker's `lock("k")` queued behind it. Returns the holder, its
/// guard and the pending lock.
async fn held_with_ghost_and_waiter(
    namespace: &str,
    ghost: &str,
    deadline_ms: u64,
    lease_ms: u64,
) -> (Locker, LockGuard, tokio::task::JoinHandle<LockGuard>) {
    let [holder, waiter] = lockers_in(namespace).await;
    let guard = holder.lock("k").await.unwrap();
    plant_waiter(&holder, "k", ghost, deadline_ms, lease_ms).await;
    let waiting = tokio::spawn(async move { waiter.lock("k").await.unwrap() });
    until_in_line(&holder, "k", 2).await;
    (holder, guard, waiting)
}

/// The guard the spawned `waiting` lock call returns within `secs`
/// seconds; panics with `why` if it takes longer.
async fn handed_within(
    secs: u64,
    waiting: tokio::task::JoinHandle<LockGuard>,
    why: &str,
) -> LockGuard {
    tokio::time::timeout(std::time::Duration::from_secs(secs), waiting)
        .await
        .expect(why)
        .unwrap()
}

/// The server's clock in milliseconds.
async fn server_ms() -> u64 {
    let mut raw = raw_redis().await;
    let (secs, micros): (u64, u64) = ::redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    secs * 1000 + micros / 1000
}

/// A release hands the lock to the waiter in line: it holds it while the
/// releaser's `release()` returns, and a newcomer's `try_lock` in between
/// finds it taken.
#[tokio::test]
async fn a_release_hands_the_lock_to_the_waiter_in_line() {
    let [holder, waiter, newcomer] = lockers_in("redis-hand-off").await;
    let guard = holder.lock("k").await.unwrap();
    let waiting = tokio::spawn(async move { waiter.lock("k").await.unwrap() });
    until_in_line(&holder, "k", 1).await;
    guard.release().await.unwrap();
    // Handed over inside the release: never free in between.
    assert!(newcomer.try_lock("k").await.unwrap().is_none());
    let handed = handed_within(2, waiting, "the waiter got the lock at once").await;
    let info = holder_of(&holder, "k", "held").await;
    assert_eq!(info.token, handed.token());
    handed.release().await.unwrap();
    assert!(holder.inspect("k").await.unwrap().is_none());
}

/// A place whose waiter stopped renewing it is skipped: the next live
/// waiter gets the lock at the release, not after the dead one's lease.
#[tokio::test]
async fn a_lapsed_place_in_line_is_skipped() {
    let deadline_ms = server_ms().await - 1;
    let (_holder, guard, waiting) =
        held_with_ghost_and_waiter("redis-lapsed-place", "ghost/1/lapsed", deadline_ms, 10_000)
            .await;
    guard.release().await.unwrap();
    let handed = handed_within(2, waiting, "the live waiter got the lock at the release").await;
    handed.release().await.unwrap();
}

/// A waiter that vanished just before its turn is handed the lock and
/// holds it for its lease at most, like a holder killed after taking it;
/// the waiter behind it gets the lock then.
#[tokio::test]
async fn a_vanished_waiter_handed_the_lock_holds_it_for_its_lease_only() {
    let deadline_ms = server_ms().await + 60_000;
    let (holder, guard, waiting) =
        held_with_ghost_and_waiter("redis-vanished-waiter", "ghost/2/fresh", deadline_ms, 1_000)
            .await;
    let started = std::time::Instant::now();
    guard.release().await.unwrap();
    let info = holder_of(&holder, "k", "handed on").await;
    assert_eq!(info.owner, "ghost/2/fresh");
    let handed = handed_within(5, waiting, "the lock came free after the ghost's 1 s lease").await;
    assert!(started.elapsed() >= std::time::Duration::from_millis(900));
    assert!(handed.token() > info.token);
    handed.release().await.unwrap();
}

/// A waiter keeps its place while it waits longer than a place lives
/// unrenewed (3 s): one that queued later is served after it.
#[tokio::test]
async fn a_long_wait_keeps_its_place_in_line() {
    let [holder, first, second] = lockers_in("redis-long-wait").await;
    let guard = holder.lock("k").await.unwrap();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let spawn_waiter = |locker: Locker, n: usize| {
        let order = std::sync::Arc::clone(&order);
        tokio::spawn(async move {
            let guard = locker.lock("k").await.unwrap();
            order.lock().unwrap().push(n);
            guard.release().await.unwrap();
        })
    };
    let a = spawn_waiter(first, 1);
    until_in_line(&holder, "k", 1).await;
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let b = spawn_waiter(second, 2);
    until_in_line(&holder, "k", 2).await;
    guard.release().await.unwrap();
    for task in [a, b] {
        tokio::time::timeout(std::time::Duration::from_secs(5), task)
            .await
            .expect("both waiters served")
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [1, 2]);
}

/// A `lock()` call dropped while in line leaves it: the waiter behind
/// gets the lock at the release, not after the dropped one's lease.
#[tokio::test]
async fn a_waiter_dropped_in_line_leaves_it() {
    let [holder, dropped, next] = lockers_in("redis-dropped-waiter").await;
    let guard = holder.lock("k").await.unwrap();
    let doomed = tokio::spawn(async move { dropped.lock("k").await.map(drop) });
    until_in_line(&holder, "k", 1).await;
    let waiting = tokio::spawn(async move { next.lock("k").await.unwrap() });
    until_in_line(&holder, "k", 2).await;
    doomed.abort();
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while waiters_in_line(&mut raw_redis().await, &holder, "k")
            .await
            .len()
            > 1
        {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the dropped waiter left the line");
    guard.release().await.unwrap();
    let handed = handed_within(
        3,
        waiting,
        "the next waiter got the lock well before the 10 s lease",
    )
    .await;
    handed.release().await.unwrap();
}

/// A waiter on a current-thread runtime and a thread of its own, which
/// [`freeze`](Self::freeze) stops dead for a while, as a stalled process
/// would be: nothing on that runtime runs, pub/sub messages wait unread.
struct FrozenWaiter {
    freeze: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl FrozenWaiter {
    /// Connects to `url` there and spawns `wait(locker)`; once frozen for
    /// `stall`, runs `then(task of wait)` on that runtime.
    fn start<W, WF, T, TF>(url: String, stall: std::time::Duration, wait: W, then: T) -> Self
    where
        W: FnOnce(Locker) -> WF + Send + 'static,
        WF: std::future::Future + Send + 'static,
        WF::Output: Send + 'static,
        T: FnOnce(tokio::task::JoinHandle<WF::Output>) -> TF + Send + 'static,
        TF: std::future::Future<Output = ()>,
    {
        let (freeze, frozen) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let locker = connect(&url).await.unwrap();
                let waiting = tokio::spawn(wait(locker));
                while frozen.try_recv().is_err() {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
                std::thread::sleep(stall);
                then(waiting).await;
            });
        });
        Self { freeze, thread }
    }

    /// Freezes the waiter's runtime now.
    fn freeze(&self) {
        self.freeze.send(()).unwrap();
    }

    /// Waits for the waiter's thread to end.
    async fn join(self) {
        tokio::task::spawn_blocking(move || self.thread.join().unwrap())
            .await
            .unwrap();
    }
}

/// A `lock()` call dropped after the lock was handed to it, before it
/// heard of the hand-off, passes the lock on: the waiter behind gets it
/// at once, not after the dropped one's 10 s lease. The dropped waiter
/// runs on a runtime of its own, frozen across the release so that it
/// cannot take the hand-off first.
#[tokio::test]
async fn a_waiter_dropped_after_its_hand_off_passes_the_lock_on() {
    use std::time::Duration;

    let (url, [holder, next]) = lockers("ttl=10s&namespace=redis-dropped-after-hand-off").await;
    let guard = holder.lock("k").await.unwrap();
    let frozen_waiter = FrozenWaiter::start(
        url,
        // Frozen across the release: the hand-off announced meanwhile
        // waits unread.
        Duration::from_millis(800),
        |locker| async move {
            let guard = locker.lock("k").await.unwrap();
            std::future::pending::<()>().await;
            drop(guard);
        },
        |waiting| async move {
            waiting.abort();
            // Time for the clean-up to run on this runtime.
            tokio::time::sleep(Duration::from_secs(4)).await;
        },
    );
    until_in_line(&holder, "k", 1).await;
    let waiting = tokio::spawn(async move { next.lock("k").await.unwrap() });
    until_in_line(&holder, "k", 2).await;
    frozen_waiter.freeze();
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.release().await.unwrap();
    // Handed to the frozen waiter, first in line.
    let info = holder_of(&holder, "k", "handed on").await;
    let handed = handed_within(
        4,
        waiting,
        "the next waiter got the lock well before the 10 s lease",
    )
    .await;
    assert!(handed.token() > info.token);
    handed.release().await.unwrap();
    frozen_waiter.join().await;
}

/// A waiter whose process stalled past the lease it was handed does not
/// return a guard for a lock another client holds by then, whichever it
/// sees first on waking: the stale hand-off (checked with the server) or
/// its own retry (which finds the lock taken).
#[tokio::test]
async fn a_hand_off_heard_after_its_lease_ran_out_is_not_trusted() {
    use std::time::Duration;

    let (url, [holder, other]) = lockers("ttl=1s&namespace=redis-stale-hand-off").await;
    let guard = holder.lock("k").await.unwrap();
    let (outcome_tx, outcome_rx) = tokio::sync::oneshot::channel();
    let stalled_waiter = FrozenWaiter::start(
        url,
        // Stalled past the handed lease (1 s).
        Duration::from_millis(1600),
        |locker| async move {
            let options = LockOptions::new().wait(Duration::from_secs(4));
            match locker.lock_with("k", options).await {
                Ok(guard) => Some((guard.token(), guard.is_held())),
                Err(e) if e.is_timeout() => None,
                Err(e) => panic!("stalled waiter: {e}"),
            }
        },
        |waiting| async move {
            let _ = outcome_tx.send(waiting.await.unwrap());
        },
    );
    until_in_line(&holder, "k", 1).await;
    stalled_waiter.freeze();
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard.release().await.unwrap();
    // The stalled waiter's lease runs out; another client takes the lock
    // and holds it while the waiter wakes up.
    let taken = tokio::time::timeout(Duration::from_secs(3), other.lock("k"))
        .await
        .expect("the lock came free after the stalled waiter's lease")
        .unwrap();
    let outcome = outcome_rx.await.unwrap();
    assert!(
        outcome.is_none_or(|(token, held)| held && token > taken.token()),
        "the stalled waiter returned {outcome:?} while the lock was held with token {}",
        taken.token()
    );
    drop(taken);
    stalled_waiter.join().await;
}

/// A lock, its token counter and its channel hash to one slot, whatever
/// the key: the scripts touch lock and counter together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_with_braces_work_on_a_cluster() {
    let url = shared_cluster_url().await.unwrap();
    let locker = connect(&format!("{url}?namespace=braces&ttl=2s"))
        .await
        .unwrap();
    assert_eq!(locker.backend_name(), "redis-cluster");
    for key in ["{", "}", "a}b{c", "{x}", "}{", "%7D"] {
        let guard = locker.try_lock(key).await.unwrap().expect("free");
        let info = holder_of(&locker, key, "held").await;
        assert_eq!(info.token, guard.token(), "{key}");
        guard.release().await.unwrap();
    }
}
