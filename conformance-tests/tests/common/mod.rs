//! What the suites' binaries share: the cases a store cannot run, declared
//! once for each thing a store may lack, and the factory of a Redis URL.

#![allow(dead_code, unused_macros)] // each suite uses a different part

use conformance_tests::StoreFactory;
use distlock_testkit::redis::TEST_TIMEOUTS;
use distlock_testkit::with_query;

/// Declares the suite as module `$module` on the store `$factory` makes,
/// with the cases not applicable for each thing the store lacks:
///
/// * `per_lock_expiry`: its locks live as long as the client's session,
///   session lease or process, and no lock expires on its own;
/// * `leases`: no lock has a lease at all (locks live with the process
///   that holds them), so no token or permit outlives one;
/// * `outages`: a client cannot be cut off and back, either because
///   there is no network (file, memory) or because clients follow the
///   addresses the servers announce (Cluster nodes, Sentinels naming the
///   master) and cannot be kept behind a fault proxy; the single-instance
///   suite covers the connection handling, which is the same.
macro_rules! conformance_tests_lacking {
    ($module:ident, $factory:ident, [$($lacks:ident),+]) => {
        conformance_tests_lacking!(@cases $module, $factory, [$($lacks)+], []);
    };
    (@cases $module:ident, $factory:ident, [], [$($case:ident)*]) => {
        lock_core::conformance_tests!($module, $factory, not_applicable: [$($case),*]);
    };
    (@cases $module:ident, $factory:ident, [per_lock_expiry $($rest:ident)*], [$($case:ident)*]) => {
        conformance_tests_lacking!(@cases $module, $factory, [$($rest)*], [$($case)*
            abandoned_lock_is_freed_after_ttl
            loss_is_signalled_before_others_can_acquire
            stalled_leader_is_replaced_after_ttl
            watch_reports_expiry
        ]);
    };
    (@cases $module:ident, $factory:ident, [leases $($rest:ident)*], [$($case:ident)*]) => {
        conformance_tests_lacking!(@cases $module, $factory, [$($rest)*], [$($case)*
            tokens_increase_across_expiry
            lost_fires_for_read_locks_and_permits
            vanished_permit_returns_after_ttl
        ]);
    };
    (@cases $module:ident, $factory:ident, [outages $($rest:ident)*], [$($case:ident)*]) => {
        conformance_tests_lacking!(@cases $module, $factory, [$($rest)*], [$($case)*
            unreachable_store_gives_unavailable_then_recovers
            guard_dropped_while_unreachable_frees_the_lock_once_back
        ]);
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
