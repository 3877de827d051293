//! The conformance suite against etcd with `layout=concurrency` (the
//! layout of etcd's Go `concurrency` package and `etcdctl lock`/`elect`),
//! on the shared single member the testkit spawns. The namespace is not
//! part of this layout's keys, so each case's lockers get a `key_prefix`
//! of their own; a lock is taken away by deleting the first-created key
//! under its prefix.
//!
//! Pinned as not applicable, each reporting why: the cases of locks that
//! expire on their own (locks live with the session lease, as in the
//! distlock layout), namespaces (not part of the keys), purging a
//! namespace (NotSupported), read-write locks and semaphores (the Go
//! recipes have neither: NotSupported).

#[macro_use]
mod common;

use conformance_tests::layout_factory::EtcdConcurrencyFactory;
use distlock_testkit::etcd::{shared_etcd_url, TEST_TIMEOUTS};
use distlock_testkit::{env_override, loopback_hosts, with_query, ETCD_URL_VAR};
use lock_core::backend::Capabilities;

async fn etcd_concurrency_factory() -> EtcdConcurrencyFactory {
    let url = shared_etcd_url().await.expect("etcd test server");
    // A server from DISTLOCK_TEST_ETCD_URL cannot be put behind a proxy we
    // know the target of; the outage case then reports itself not applicable.
    let members = match env_override(ETCD_URL_VAR) {
        Some(_) => Vec::new(),
        None => loopback_hosts(&url),
    };
    EtcdConcurrencyFactory::new(with_query(&url, TEST_TIMEOUTS), members)
}

lock_core::conformance_tests!(
    etcd_concurrency,
    etcd_concurrency_factory,
    not_applicable: [
        // Locks live as long as the session lease.
        abandoned_lock_is_freed_after_ttl,
        loss_is_signalled_before_others_can_acquire,
        stalled_leader_is_replaced_after_ttl,
        watch_reports_expiry,
        // Keys are the Go clients' names: no namespace in them.
        namespaces_isolate,
        purging_a_namespace_spares_others,
        // No read-write locks.
        readers_share_and_writers_exclude,
        waiting_writer_is_not_overtaken_by_later_readers,
        tokens_increase_across_read_and_write_guards,
        cancelled_shared_requests_leave_nothing_behind,
        lost_fires_for_read_locks_and_permits,
        // No semaphores.
        semaphore_never_exceeds_its_limit,
        semaphore_limit_mismatch_is_an_error,
        vanished_permit_returns_after_ttl,
        releasing_a_permit_lets_one_waiter_in,
    ]
);

/// The capabilities the suite's applicability depends on, and the
/// refusals that name the layout.
#[tokio::test]
async fn the_layout_declares_what_it_can_express() {
    let url = shared_etcd_url().await.expect("etcd test server");
    let locker = distlock::connect(&with_query(&url, "layout=concurrency"))
        .await
        .unwrap();
    let mut expected = Capabilities::default();
    expected.expiry = true;
    expected.force_release = true;
    expected.notified_wakeups = true;
    expected.fifo = true;
    expected.remote = true;
    expected.watch_every_change = true;
    assert_eq!(locker.capabilities(), expected);
    let refused = [
        locker.rwlock("k").err().map(|e| e.to_string()),
        locker.semaphore("k", 2).err().map(|e| e.to_string()),
        locker.purge_namespace().await.err().map(|e| e.to_string()),
    ];
    for refusal in refused {
        let message = refusal.expect("refused");
        assert!(message.contains("etcd-concurrency"), "{message}");
    }
}
