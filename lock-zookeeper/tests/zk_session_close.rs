//! Dropping lockers closes their sessions cleanly and at once, even while
//! their watches are firing: no session lingers against the server's
//! connection limit, and the client library has nothing to warn about.
//!
//! zookeeper-client treats a close whose reply is not the last one it
//! awaits as a lost connection: it reconnects, the server says the
//! (closed) session expired, and it logs `fails to establish session …
//! session expired`. A watch that fires while its removal is on the way
//! makes it send one more removal, after the close, if the close is sent
//! at once. This test drops holders, waiters and observers of busy locks
//! all at once, the moment their watches fire, and counts the library's
//! warnings.
//!
//! Its own binary: the warnings are caught by a process-wide subscriber,
//! and the connection count is read from a server no other test uses.

mod common;

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use distlock_testkit::eventually;
use distlock_testkit::zookeeper::{srvr_number, start_standalone_with, zk_url, ZkSettings};
use futures_util::StreamExt;
use lock_core::Locker;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Locks contended at once per round, each by a holder, a waiter and an
/// observer (three sessions): 30 sessions, half the server's default
/// limit per client address.
const KEYS: usize = 10;
/// Rounds of open, contend, drop.
const ROUNDS: usize = 3;

/// Warnings and errors the ZooKeeper client library logged.
fn client_warnings() -> &'static Mutex<Vec<String>> {
    static WARNINGS: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    WARNINGS.get_or_init(Default::default)
}

/// Records every event of `zookeeper_client` at WARN or above.
struct ClientWarnings;

impl<S: Subscriber> Layer<S> for ClientWarnings {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        if meta.target().starts_with("zookeeper_client") && *meta.level() <= Level::WARN {
            let mut message = String::new();
            event.record(
                &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                    message.push_str(&format!("{}={value:?} ", field.name()));
                },
            );
            client_warnings().lock().unwrap().push(message);
        }
    }
}

/// One lock made busy: held past the delay after which a holder watches
/// its own node, waited for (a watch on the holder's node) and observed
/// (another watch on it). Returns everything, to be dropped at once.
async fn busy(url: &str, key: &str) -> Vec<Box<dyn Send>> {
    let holder = common::connect(url).await.unwrap();
    let waiter = common::connect(url).await.unwrap();
    let observer = common::connect(url).await.unwrap();
    let guard = holder.lock(key).await.unwrap();
    let mut changes = observer.watch(key).unwrap();
    assert!(
        changes.next().await.unwrap().is_some(),
        "the observer sees the holder"
    );
    let waiting = {
        let (waiter, key) = (waiter.clone(), key.to_owned());
        tokio::spawn(async move { waiter.lock(&key).await })
    };
    // The holder's own-node watch starts 100 ms after the lock is taken;
    // the waiter is in line once the holder's node has a watcher.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lockers: [Locker; 3] = [holder, waiter, observer];
    vec![
        Box::new(guard),
        Box::new(AbortOnDrop(waiting)),
        Box::new(changes),
        Box::new(lockers),
    ]
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_lockers_close_their_sessions_cleanly_and_at_once() {
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(ClientWarnings))
        .expect("the only subscriber of this test binary");
    // ZooKeeper's defaults, 60 connections per client address included.
    let server = start_standalone_with(ZkSettings::default()).await.unwrap();
    let addr = server.addr();
    // The probe's own connection.
    let idle = srvr_number(addr, "Connections").await.unwrap();
    for round in 0..ROUNDS {
        let url = zk_url(&[addr], "/close", &format!("ttl=4s&namespace=r{round}"));
        let made = (0..KEYS).map(|i| {
            let url = url.clone();
            tokio::spawn(async move { busy(&url, &format!("k{i}")).await })
        });
        let mut everything = Vec::new();
        for task in made {
            everything.push(task.await.unwrap());
        }
        // Guards released in the background, waiters cancelled, watches
        // dropped and sessions closed, all while each lock changes hands.
        drop(everything);
        eventually(Duration::from_secs(10), "every session closed", || async {
            match srvr_number(addr, "Connections").await? {
                n if n <= idle => Ok(()),
                n => Err(format!("{} connections still open", n - idle)),
            }
        })
        .await
        .unwrap_or_else(|e| panic!("round {round}: {e}"));
    }
    let warnings = client_warnings().lock().unwrap();
    assert!(
        warnings.is_empty(),
        "the ZooKeeper client warned {} times, first: {}",
        warnings.len(),
        warnings[0]
    );
}
