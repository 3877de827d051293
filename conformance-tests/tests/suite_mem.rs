//! The conformance suite against the in-memory reference backend, opened
//! by URL through the `distlock` facade.

use distlock::conformance::UrlFactory;
use lock_core::backend::Capabilities;

async fn mem_factory() -> UrlFactory {
    UrlFactory::new("mem://conformance").expect("valid URL")
}

// A memory store lives in this process: nothing to cut it off from.
lock_core::conformance_tests!(
    mem,
    mem_factory,
    not_applicable: [
        unreachable_store_gives_unavailable_then_recovers,
        guard_dropped_while_unreachable_frees_the_lock_once_back,
    ]
);

/// The capabilities the suite's applicability depends on; a flipped flag
/// would silently change which cases run.
#[tokio::test]
async fn mem_declares_its_capabilities() {
    let locker = distlock::connect("mem://conformance").await.unwrap();
    let mut expected = Capabilities::default();
    expected.expiry = true;
    expected.per_lock_expiry = true;
    expected.force_release = true;
    expected.notified_wakeups = true;
    expected.fifo = true;
    expected.shared_locks = true;
    expected.semaphores = true;
    expected.watch_every_change = true;
    expected.namespaced_keys = true;
    expected.stored_limits = true;
    assert_eq!(locker.capabilities(), expected);
}
