//! The election rows on an in-memory store, and on one whose watch
//! delivers nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use distlock::{LockError, LockName, Locker, LockerOptions, Namespace};
use lock_core::backend::{AcquireRequest, Acquired, Backend, Capabilities, HolderStream};
use lock_core::memory::MemoryBackend;
use lock_core::LockInfo;

use super::{failover, observe, run, Failover, Observe, CRASH_TTL};
use crate::bench::opener::Opener;
use crate::url::ChosenStore;

/// The memory store, except that its watch never yields anything: a store
/// whose watch is not there.
#[derive(Debug)]
struct Blind(MemoryBackend);

#[async_trait]
impl Backend for Blind {
    fn name(&self) -> &'static str {
        "blind"
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Option<Acquired>, LockError> {
        self.0.acquire(request).await
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<LockInfo>, LockError> {
        self.0.inspect(name).await
    }

    fn watch(&self, _name: &LockName) -> HolderStream {
        Box::pin(futures_util::stream::pending())
    }
}

/// An opener whose every locker is `locker` (as with `--shared`).
fn shared(locker: Locker) -> Opener {
    Opener {
        store: ChosenStore::new("mem://".to_owned()),
        namespace: locker.namespace().to_string(),
        shared: Some((locker, None)),
    }
}

fn options(namespace: &str) -> LockerOptions {
    LockerOptions {
        namespace: Namespace::new(namespace).unwrap(),
        ..LockerOptions::default()
    }
}

#[tokio::test]
async fn a_watch_that_delivers_nothing_fails_the_observe_row_in_time() {
    let backend = Arc::new(Blind(MemoryBackend::named("bench-election-blind")));
    let opener = shared(Locker::new(backend, options("blind")));
    let patience = Duration::from_millis(300);
    let started = Instant::now();
    let mut row = Observe::default();
    let failed = observe::observe(&opener, None, Duration::from_millis(50), patience, &mut row);
    let error = failed.await.expect_err("the observe row must fail");
    assert!(started.elapsed() < patience * 10, "{:?}", started.elapsed());
    assert!(
        error.contains("16 of 16 observers did not see the current leader (none) within 300ms")
            && error.contains("does the store's watch deliver anything?"),
        "{error}"
    );
    assert!(row.all.is_empty() && row.each.is_empty());

    // Failover needs no watch: it still measures.
    let mut failover = Failover::default();
    let measured = failover::after_resign(&opener, None, Duration::from_millis(20), &mut failover);
    assert_eq!(measured.await, Ok(()));
    assert!(failover.handovers.len() >= 10, "{failover:?}");
}

#[tokio::test]
async fn every_row_measures_on_memory() {
    let backend = Arc::new(MemoryBackend::named("bench-election-rows"));
    let opener = shared(Locker::new(backend, options("rows")));
    let results = run(&opener, None, Duration::from_millis(50)).await;
    assert_eq!(results.errors(), Vec::<String>::new());
    assert!(results.failover.handovers.len() >= 10);
    assert!(results.failover.floor.is_empty(), "no probe, no floor");
    assert_eq!(results.crash.kind, super::CrashKind::LeakedGuard);
    assert_eq!(results.crash.from_crash.len(), 3);
    for (leak, lease) in results
        .crash
        .from_crash
        .iter()
        .zip(&results.crash.from_lease_start)
    {
        assert!(
            *lease >= CRASH_TTL,
            "led {lease:?} into a {CRASH_TTL:?} lease"
        );
        assert!(leak <= lease);
    }
    assert!(results.observe.all.len() >= 10);
    assert_eq!(results.observe.each.len(), results.observe.all.len() * 16);
}
