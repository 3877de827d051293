//! The conformance suite every backend passes (feature `conformance`).
//!
//! Each case is a public async function taking a [`LockerFactory`], which
//! opens fresh lockers — each with its own connection or session — in the
//! namespace and with the ttl the case asks for. Cases use unique
//! namespaces, so they run in parallel against one server.
//!
//! A case that needs something the backend does not declare in its
//! [`Capabilities`](crate::backend::Capabilities) returns
//! [`Outcome::NotApplicable`] naming the capability; it never passes
//! silently. [`conformance_tests!`](crate::conformance_tests) generates one
//! `#[tokio::test]` per case, and [`run_all`] runs the suite against a live
//! deployment (`distlock check`).
//!
//! ```text
//! // in a test crate: tests named `mem::mutual_exclusion`, ...
//! async fn mem_factory() -> impl lock_core::conformance::LockerFactory {
//!     lock_core::conformance::FnFactory::new(|settings| async move {
//!         let locker = lock_core::Locker::memory("suite")?;
//!         Ok(locker.with_options(settings.locker_options()))
//!     })
//! }
//! lock_core::conformance_tests!(mem, mem_factory, not_applicable: []);
//! ```

mod cases;
mod factory;
mod runner;

pub use cases::*;
pub use factory::{CaseSettings, FnFactory, LockerFactory, Outage};
pub use runner::{
    peak_lockers, run_all, run_case, Case, CaseReport, CaseStatus, Outcome, CASES,
    MAX_LOCKERS_AT_ONCE,
};

/// Result of one conformance case: how it ended, or the store error that
/// stopped it. Assertion failures panic, like in any test.
pub type CaseResult = Result<Outcome, crate::LockError>;

/// Generates one `#[tokio::test]` per conformance case, in a module named
/// after the backend, so test output reads `mem::mutual_exclusion ... ok`.
///
/// `$factory` is a path to an `async fn() -> F` where `F: LockerFactory`;
/// it is called once per test (keep expensive set-up, like a server, in a
/// static it fills once). `not_applicable: [...]` pins the cases the store
/// cannot run (by design: a capability it does not declare); each of them
/// must end as not applicable, and every other case must run and pass
/// (see [`run_case`]). A test `pinned_cases_exist` checks that the list
/// names real cases.
#[macro_export]
macro_rules! conformance_tests {
    ($backend:ident, $factory:path, not_applicable: [$($pinned:ident),* $(,)?]) => {
        mod $backend {
            #[allow(unused_imports)]
            use super::*;
            /// The cases this store cannot run, by design.
            const NOT_APPLICABLE: &[&str] = &[$(stringify!($pinned)),*];
            $crate::__conformance_case_names!(__conformance_test_fns($factory;));

            #[test]
            fn pinned_cases_exist() {
                for pinned in NOT_APPLICABLE {
                    assert!(
                        $crate::conformance::CASES.iter().any(|case| case.name == *pinned),
                        "`{pinned}` is pinned as not applicable but is no conformance case"
                    );
                }
            }
        }
    };
}

/// Calls `$crate::$callback!` with its arguments followed by the names of
/// every conformance case: the one list [`CASES`] and
/// [`conformance_tests!`](crate::conformance_tests) are made from.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_case_names {
    ($callback:ident($($args:tt)*)) => {
        $crate::$callback!($($args)*
            mutual_exclusion,
            try_lock_on_held_key_returns_none_at_once,
            wait_timeout_is_honoured,
            release_wakes_a_waiter_promptly,
            release_after_takeover_reports_lost,
            renewal_keeps_lock_past_three_ttls,
            abandoned_lock_is_freed_after_ttl,
            lost_signal_fires_when_lock_is_taken_away,
            loss_is_signalled_before_others_can_acquire,
            tokens_increase_across_holders,
            tokens_increase_across_expiry,
            independent_keys_do_not_block,
            namespaces_isolate,
            purging_a_namespace_spares_others,
            unusual_keys_work,
            invalid_keys_are_rejected,
            dropped_lock_call_leaves_nothing_behind,
            dropped_guard_frees_lock_shortly,
            locks_are_not_reentrant,
            unreachable_store_gives_unavailable_then_recovers,
            guard_dropped_while_unreachable_frees_the_lock_once_back,
            inspect_reports_holder,
            zero_wait_makes_one_attempt,
            holder_values_round_trip,
            watch_reports_acquire_and_release,
            watch_reports_expiry,
            watch_reports_a_lock_taken_away,
            watch_reports_back_to_back_changes,
            election_has_one_leader_at_a_time,
            observe_sees_every_leader_in_order,
            observe_reports_back_to_back_leaders,
            proclaim_reaches_leader_and_observers,
            stalled_leader_is_replaced_after_ttl,
            resign_hands_over_promptly,
            cancelled_campaign_leaves_nothing_behind,
            empty_election_has_no_leader,
            semaphore_never_exceeds_its_limit,
            semaphore_limit_mismatch_is_an_error,
            vanished_permit_returns_after_ttl,
            releasing_a_permit_lets_one_waiter_in,
            readers_share_and_writers_exclude,
            waiting_writer_is_not_overtaken_by_later_readers,
            tokens_increase_across_read_and_write_guards,
            cancelled_shared_requests_leave_nothing_behind,
            lost_fires_for_read_locks_and_permits,
        );
    };
}

/// One `#[tokio::test]` per case name; see [`conformance_tests!`](crate::conformance_tests).
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_test_fns {
    ($factory:path; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let factory = $factory().await;
                $crate::conformance::run_case(
                    stringify!($case),
                    NOT_APPLICABLE.contains(&stringify!($case)),
                    $crate::conformance::$case(&factory),
                )
                .await;
            }
        )+
    };
}

/// The table of [`CASES`]; see [`__conformance_case_names!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_case_table {
    ($($case:ident),+ $(,)?) => {
        /// Every conformance case, in the order of the design document.
        pub const CASES: &[Case] = &[$(
            Case {
                name: stringify!($case),
                run: {
                    fn run(factory: &dyn LockerFactory) -> CaseFuture<'_> {
                        Box::pin(super::cases::$case(factory))
                    }
                    run
                },
            }
        ),+];
    };
}
