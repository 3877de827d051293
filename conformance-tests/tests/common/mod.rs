//! What the suites' binaries share: the cases a kind of store cannot run,
//! declared once per kind, and the factory of a Redis URL.

#![allow(dead_code, unused_macros)] // each suite uses a different part

use conformance_tests::StoreFactory;
use distlock_testkit::redis::TEST_TIMEOUTS;
use distlock_testkit::with_query;

/// Declares the suite as module `$module` on the store `$factory` makes,
/// for a store whose locks live as long as the client's session or
/// session lease: no lock of its own expires, so the cases needing a
/// per-lock expiry are not applicable.
macro_rules! session_store_conformance_tests {
    ($module:ident, $factory:ident) => {
        lock_core::conformance_tests!(
            $module,
            $factory,
            not_applicable: [
                abandoned_lock_is_freed_after_ttl,
                loss_is_signalled_before_others_can_acquire,
                stalled_leader_is_replaced_after_ttl,
                watch_reports_expiry,
            ]
        );
    };
}

/// Declares the suite as module `$module` on the store `$factory` makes,
/// for a store whose clients follow addresses the servers announce
/// (Cluster nodes, Sentinels naming the master): a client cannot be kept
/// behind a fault proxy, so the outage cases are not applicable (the
/// single-instance suite covers the connection handling, which is the
/// same).
macro_rules! unproxied_conformance_tests {
    ($module:ident, $factory:ident) => {
        lock_core::conformance_tests!(
            $module,
            $factory,
            not_applicable: [
                unreachable_store_gives_unavailable_then_recovers,
                guard_dropped_while_unreachable_frees_the_lock_once_back,
            ]
        );
    };
}

/// Lockers on the Redis URL `base` of `what` (a testkit deployment's,
/// `Err` saying why there is none), with the testkit's short Redis
/// timeouts.
pub(crate) fn redis_factory(base: &Result<String, String>, what: &str) -> StoreFactory {
    let base = base
        .as_ref()
        .unwrap_or_else(|e| panic!("{what} for the suite: {e}"));
    StoreFactory::new(with_query(base, TEST_TIMEOUTS))
}
