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
///
/// After the list, `until_declared: [...]` names primitives the store may
/// not have yet, `shared_locks` (read-write locks) and `semaphores`: their
/// cases are pinned from the capabilities the store declares when the
/// test runs, not listed here, so they start running (and must pass) the
/// day the store declares the capability.
macro_rules! conformance_tests_lacking {
    ($module:ident, $factory:ident, [$($lacks:ident),+]) => {
        conformance_tests_lacking!(@cases $module, $factory, [$($lacks)+], [], [], []);
    };
    ($module:ident, $factory:ident, [$($lacks:ident),+], until_declared: [$($capability:ident),+]) => {
        conformance_tests_lacking!(
            @cases $module, $factory, [$($lacks)+], [], [$($capability)+], []
        );
    };
    (@cases $module:ident, $factory:ident, [], [$($case:ident)*], [], [$($without:tt)*]) => {
        lock_core::conformance_tests!(
            $module,
            $factory,
            not_applicable: [$($case),*],
            not_applicable_without: [$($without)*]
        );
    };
    (@cases $module:ident, $factory:ident, [], [$($case:ident)*],
     [shared_locks $($rest:ident)*], [$($without:tt)*]) => {
        conformance_tests_lacking!(@cases $module, $factory, [], [$($case)*], [$($rest)*], [
            $($without)*
            shared_locks: [
                readers_share_and_writers_exclude,
                waiting_writer_is_not_overtaken_by_later_readers,
                tokens_increase_across_read_and_write_guards,
                cancelled_shared_requests_leave_nothing_behind,
                lost_fires_for_read_locks_and_permits,
            ],
        ]);
    };
    (@cases $module:ident, $factory:ident, [], [$($case:ident)*],
     [semaphores $($rest:ident)*], [$($without:tt)*]) => {
        conformance_tests_lacking!(@cases $module, $factory, [], [$($case)*], [$($rest)*], [
            $($without)*
            semaphores: [
                semaphore_never_exceeds_its_limit,
                semaphore_limit_mismatch_is_an_error,
                vanished_permit_returns_after_ttl,
                releasing_a_permit_lets_one_waiter_in,
                cancelled_shared_requests_leave_nothing_behind,
                lost_fires_for_read_locks_and_permits,
            ],
        ]);
    };
    (@cases $module:ident, $factory:ident, [per_lock_expiry $($rest:ident)*], [$($case:ident)*],
     $capabilities:tt, $without:tt) => {
        conformance_tests_lacking!(@cases $module, $factory, [$($rest)*], [$($case)*
            abandoned_lock_is_freed_after_ttl
            loss_is_signalled_before_others_can_acquire
            stalled_leader_is_replaced_after_ttl
            watch_reports_expiry
        ], $capabilities, $without);
    };
    (@cases $module:ident, $factory:ident, [leases $($rest:ident)*], [$($case:ident)*],
     $capabilities:tt, $without:tt) => {
        conformance_tests_lacking!(@cases $module, $factory, [$($rest)*], [$($case)*
            tokens_increase_across_expiry
            lost_fires_for_read_locks_and_permits
            vanished_permit_returns_after_ttl
        ], $capabilities, $without);
    };
    (@cases $module:ident, $factory:ident, [outages $($rest:ident)*], [$($case:ident)*],
     $capabilities:tt, $without:tt) => {
        conformance_tests_lacking!(@cases $module, $factory, [$($rest)*], [$($case)*
            unreachable_store_gives_unavailable_then_recovers
            guard_dropped_while_unreachable_frees_the_lock_once_back
        ], $capabilities, $without);
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
