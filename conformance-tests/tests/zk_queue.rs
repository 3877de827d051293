//! The ZooKeeper queue with waiters that give up in the middle of it.
//!
//! A waiter holds the lock on its predecessor's deletion, without listing
//! the queue again, only when it has seen that predecessor at the head.
//! These tests queue waiters in a known order, let some of them time out
//! while others are still ahead, and check that the rest get the lock one
//! at a time, in queue order.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use conformance_tests::zookeeper::{shared_standalone, zk_url};
use distlock::lock_zookeeper::names::lock_dir;
use distlock::{LockOptions, Locker};

/// How a queued waiter behaves.
#[derive(Clone, Copy, Debug)]
enum Waiter {
    /// Waits until it gets the lock.
    Stays,
    /// Gives up after this long, while the lock is still held.
    QuitsAfter(Duration),
}

/// What a waiter did, in the order it happened.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    Took(usize),
    Left(usize),
    TimedOut(usize),
}

async fn open(addrs: &[std::net::SocketAddr], namespace: &str) -> Locker {
    let url = zk_url(addrs, "/queue", &format!("ttl=10s&namespace={namespace}"));
    distlock::connect(&url).await.unwrap()
}

/// Holds `key`, queues `waiters` behind the holder in this order (each one
/// enters only after the one before it is in the queue), waits until those
/// that quit have timed out, releases, and returns what the waiters did.
async fn run_queue(namespace: &str, waiters: &[Waiter]) -> Vec<Event> {
    const KEY: &str = "queue";
    let addrs = shared_standalone().await.unwrap_or_else(|e| panic!("{e}"));
    let holder = open(&addrs, namespace).await;
    let guard = holder.lock(KEY).await.unwrap();
    let hosts: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    let raw = zookeeper_client::Client::connect(&hosts.join(","))
        .await
        .unwrap();
    let dir = lock_dir("/queue", &holder.name(KEY).unwrap());

    let events = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, &waiter) in waiters.iter().enumerate() {
        let locker = open(&addrs, namespace).await;
        let events = Arc::clone(&events);
        tasks.push(tokio::spawn(async move {
            let options = match waiter {
                Waiter::Stays => LockOptions::new().wait(Duration::from_secs(60)),
                Waiter::QuitsAfter(after) => LockOptions::new().wait(after),
            };
            match locker.lock_with(KEY, options).await {
                Ok(guard) => {
                    events.lock().unwrap().push(Event::Took(i));
                    // Long enough for a second holder to show up, were
                    // the queue to let one in early.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    events.lock().unwrap().push(Event::Left(i));
                    guard.release().await.unwrap();
                }
                Err(e) if e.is_timeout() => events.lock().unwrap().push(Event::TimedOut(i)),
                Err(e) => panic!("waiter {i}: {e}"),
            }
        }));
        // The holder's node plus one per waiter so far.
        wait_for_children(&raw, &dir, i + 2).await;
    }
    let quitters = waiters
        .iter()
        .filter(|w| matches!(w, Waiter::QuitsAfter(_)))
        .count();
    tokio::time::timeout(Duration::from_secs(30), async {
        while events.lock().unwrap().len() < quitters {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the waiters that quit did not time out");
    guard.release().await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("a waiter never got the lock")
            .unwrap();
    }
    Arc::try_unwrap(events).unwrap().into_inner().unwrap()
}

async fn wait_for_children(raw: &zookeeper_client::Client, dir: &str, count: usize) {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match raw.list_children(dir).await {
                Ok(children) if children.len() >= count => return,
                Ok(_) | Err(zookeeper_client::Error::NoNode) => {}
                Err(e) => panic!("list {dir}: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{dir} never had {count} contenders"));
}

/// The waiters that stayed took the lock one at a time (each left before
/// the next took it), in the order they queued.
fn assert_served_in_order(events: &[Event], stayed: &[usize]) {
    let served: Vec<&Event> = events
        .iter()
        .filter(|e| !matches!(e, Event::TimedOut(_)))
        .collect();
    let expected: Vec<Event> = stayed
        .iter()
        .flat_map(|&i| [Event::Took(i), Event::Left(i)])
        .collect();
    assert_eq!(
        served,
        expected.iter().collect::<Vec<_>>(),
        "all events: {events:?}"
    );
}

const SOON: Duration = Duration::from_millis(600);
const LATER: Duration = Duration::from_millis(1200);

/// Every other waiter quits: each remaining one sees its predecessor go
/// while another waiter is still ahead, and must not take the lock then.
#[tokio::test]
async fn waiters_whose_predecessor_quits_wait_for_the_ones_still_ahead() {
    use Waiter::*;
    let events = run_queue(
        "zkq-predecessor-quits",
        &[Stays, QuitsAfter(SOON), Stays, QuitsAfter(LATER), Stays],
    )
    .await;
    assert_served_in_order(&events, &[0, 2, 4]);
}

/// The waiter two ahead quits, then the predecessor does: the waiter
/// behind them looks at the queue again each time and must find others
/// still ahead, not take the lock because the node two ahead went.
#[tokio::test]
async fn waiters_whose_two_ahead_quit_wait_for_the_head() {
    use Waiter::*;
    let events = run_queue(
        "zkq-two-quit",
        &[
            Stays,
            QuitsAfter(SOON),
            QuitsAfter(LATER),
            Stays,
            QuitsAfter(SOON),
            Stays,
        ],
    )
    .await;
    assert_served_in_order(&events, &[0, 3, 5]);
}

/// A long queue with nobody quitting is served strictly in order, with
/// never two holders at once.
#[tokio::test]
async fn a_long_queue_is_served_in_order() {
    let events = run_queue("zkq-long", &[Waiter::Stays; 8]).await;
    assert_served_in_order(&events, &(0..8).collect::<Vec<_>>());
}
