//! The conformance suite against Redlock over five independent
//! `redis-server` masters shared by the cases of this binary. The outage
//! case puts a fault proxy in front of every master and cuts them all.

use conformance_tests::StoreFactory;
use distlock_testkit::redis::{redlock_url, shared_redlock_servers, TEST_TIMEOUTS};
use distlock_testkit::with_query;

async fn redlock_factory() -> StoreFactory {
    let masters = shared_redlock_servers(5).await.expect("five Redis masters");
    let addrs: Vec<_> = masters.iter().map(|s| s.addr()).collect();
    let base = redlock_url(addrs.iter().copied());
    StoreFactory::new(with_query(&base, TEST_TIMEOUTS)).outage_through(addrs)
}

// Independent masters cannot keep one FIFO line or a consistent holder
// count: Redlock has no read locks nor semaphores.
lock_core::conformance_tests!(
    redlock,
    redlock_factory,
    not_applicable: [
        readers_share_and_writers_exclude,
        waiting_writer_is_not_overtaken_by_later_readers,
        tokens_increase_across_read_and_write_guards,
        cancelled_shared_requests_leave_nothing_behind,
        lost_fires_for_read_locks_and_permits,
        semaphore_never_exceeds_its_limit,
        semaphore_limit_mismatch_is_an_error,
        vanished_permit_returns_after_ttl,
        releasing_a_permit_lets_one_waiter_in,
    ]
);
