//! Queue-order checks for the backends whose waiters form a FIFO queue
//! (etcd, ZooKeeper), with waiters that give up in the middle of it.
//!
//! Those backends let a waiter take the lock on its predecessor's
//! deletion, without reading the queue again, once it has seen that
//! predecessor at the head. [`run_queue`] queues waiters in a known order
//! behind a holder, lets some of them time out while others are still
//! ahead, releases, and reports what each did, so a test can check that
//! the rest were served one at a time, in queue order.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{LockOptions, Locker};
use tokio::task::JoinHandle;

/// The key every queue check locks (each check has its own namespace).
pub const QUEUE_KEY: &str = "queue";

/// A short wait: the first waiters to quit give up after this.
pub const SOON: Duration = Duration::from_millis(600);
/// A longer wait: waiters quitting after this are still queued when the
/// `SOON` ones have left.
pub const LATER: Duration = Duration::from_millis(1200);

/// How a queued waiter behaves.
#[derive(Clone, Copy, Debug)]
pub enum Waiter {
    /// Waits until it gets the lock.
    Stays,
    /// Gives up after this long, while the lock is still held.
    QuitsAfter(Duration),
}

/// What a waiter did, in the order it happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Waiter `n` got the lock.
    Took(usize),
    /// Waiter `n` is about to release it.
    Left(usize),
    /// Waiter `n` gave up.
    TimedOut(usize),
}

/// Holds [`QUEUE_KEY`] with a locker from `open`, queues `waiters` behind
/// it in this order (each on a locker of its own, entering only once the
/// one before it is in the queue), waits until those that quit have timed
/// out, releases, and returns what the waiters did.
///
/// `queued(holder)` lists the names of the entries queued for
/// [`QUEUE_KEY`] in `holder`'s namespace, read from outside distlock. A
/// waiter is in the queue once a name shows up that was not there before
/// it started (counting would be fooled by a waiter that quits meanwhile).
pub async fn run_queue<O, OF, Q, QF>(open: O, queued: Q, waiters: &[Waiter]) -> Vec<Event>
where
    O: Fn() -> OF,
    OF: Future<Output = Locker>,
    Q: Fn(Locker) -> QF,
    QF: Future<Output = Vec<String>>,
{
    let holder = open().await;
    let guard = holder.lock(QUEUE_KEY).await.unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, &waiter) in waiters.iter().enumerate() {
        let locker = open().await;
        let before: HashSet<String> = queued(holder.clone()).await.into_iter().collect();
        tasks.push(spawn_waiter(locker, i, waiter, Arc::clone(&events)));
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let now = queued(holder.clone()).await;
                if now.iter().any(|name| !before.contains(name)) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("waiter {i} never queued"));
    }
    let quitters = waiters
        .iter()
        .filter(|w| matches!(w, Waiter::QuitsAfter(_)))
        .count();
    let early = wait_for_quitters(&events, quitters).await;
    assert!(
        early.iter().all(|e| matches!(e, Event::TimedOut(_))),
        "a waiter got the lock while it was held: {early:?}"
    );
    guard.release().await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("a waiter never got the lock")
            .unwrap();
    }
    Arc::try_unwrap(events).unwrap().into_inner().unwrap()
}

/// Starts waiter `i` on `locker`: it waits for [`QUEUE_KEY`] as `waiter`
/// says and records in `events` what it did.
fn spawn_waiter(
    locker: Locker,
    i: usize,
    waiter: Waiter,
    events: Arc<Mutex<Vec<Event>>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let options = match waiter {
            Waiter::Stays => LockOptions::new().wait(Duration::from_secs(60)),
            Waiter::QuitsAfter(after) => LockOptions::new().wait(after),
        };
        match locker.lock_with(QUEUE_KEY, options).await {
            Ok(guard) => {
                events.lock().unwrap().push(Event::Took(i));
                // Long enough for a second holder to show up, were the
                // queue to let one in early.
                tokio::time::sleep(Duration::from_millis(100)).await;
                events.lock().unwrap().push(Event::Left(i));
                guard.release().await.unwrap();
            }
            Err(e) if e.is_timeout() => events.lock().unwrap().push(Event::TimedOut(i)),
            Err(e) => panic!("waiter {i}: {e}"),
        }
    })
}

/// Waits until `quitters` events are recorded (the waiters that quit
/// timing out, if the queue holds), and returns the events so far.
async fn wait_for_quitters(events: &Mutex<Vec<Event>>, quitters: usize) -> Vec<Event> {
    tokio::time::timeout(Duration::from_secs(30), async {
        while events.lock().unwrap().len() < quitters {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the waiters that quit did not time out");
    events.lock().unwrap().clone()
}

/// Runs [`run_queue`] on `shape` and asserts that the waiters it names
/// were served one at a time, in queue order.
pub async fn check_queue<O, OF, Q, QF>(open: O, queued: Q, (waiters, served): Shape)
where
    O: Fn() -> OF,
    OF: Future<Output = Locker>,
    Q: Fn(Locker) -> QF,
    QF: Future<Output = Vec<String>>,
{
    let events = run_queue(open, queued, &waiters).await;
    assert_served_in_order(&events, &served);
}

/// Asserts that the waiters in `stayed` took the lock one at a time (each
/// left before the next took it), in this order, and nobody else did.
pub fn assert_served_in_order(events: &[Event], stayed: &[usize]) {
    let served: Vec<Event> = events
        .iter()
        .copied()
        .filter(|e| !matches!(e, Event::TimedOut(_)))
        .collect();
    let expected: Vec<Event> = stayed
        .iter()
        .flat_map(|&i| [Event::Took(i), Event::Left(i)])
        .collect();
    assert_eq!(served, expected, "all events: {events:?}");
}

/// A queue shape to check and the waiters that must be served, in order.
pub type Shape = (Vec<Waiter>, Vec<usize>);

/// Every other waiter quits: each remaining one sees its predecessor go
/// while another waiter is still ahead, and must not take the lock then.
pub fn predecessor_quits() -> Shape {
    use Waiter::*;
    let waiters = vec![Stays, QuitsAfter(SOON), Stays, QuitsAfter(LATER), Stays];
    (waiters, vec![0, 2, 4])
}

/// The waiter two ahead quits, then the predecessor: the one behind them
/// must find others still ahead each time, not take the lock because the
/// entry two ahead went.
pub fn two_ahead_quit() -> Shape {
    use Waiter::*;
    let waiters = vec![
        Stays,
        QuitsAfter(SOON),
        QuitsAfter(LATER),
        Stays,
        QuitsAfter(SOON),
        Stays,
    ];
    (waiters, vec![0, 3, 5])
}

/// Nobody quits: served strictly in order, never two holders at once.
pub fn long_queue() -> Shape {
    (vec![Waiter::Stays; 8], (0..8).collect())
}

/// Defines the queue-order tests for one backend, in the module where it
/// is invoked: `$check(namespace, shape)` must run [`run_queue`] on one
/// [`Shape`] with lockers in that namespace and assert its outcome; each
/// test's namespace is `$prefix` and the shape's name.
#[macro_export]
macro_rules! queue_order_tests {
    ($prefix:literal, $check:path) => {
        #[tokio::test]
        async fn waiters_whose_predecessor_quits_wait_for_the_ones_still_ahead() {
            let shape = $crate::queue::predecessor_quits();
            $check(concat!($prefix, "-predecessor-quits"), shape).await;
        }

        #[tokio::test]
        async fn waiters_whose_two_ahead_quit_wait_for_the_head() {
            let shape = $crate::queue::two_ahead_quit();
            $check(concat!($prefix, "-two-ahead-quit"), shape).await;
        }

        #[tokio::test]
        async fn a_long_queue_is_served_in_order() {
            $check(concat!($prefix, "-long"), $crate::queue::long_queue()).await;
        }
    };
}
