//! The conformance suite against ZooKeeper with `layout=curator` (locks
//! laid out as Apache Curator's recipes), on the standalone server shared
//! by the cases. Each case's lockers get a base path of their own (keys
//! are paths shared by every namespace in this layout); a lock is taken
//! away by deleting its holder's node.

use conformance_tests::zk_layout_factory::ZkCuratorFactory;
use distlock_testkit::loopback_hosts;
use distlock_testkit::zookeeper::{shared_standalone, zk_url};

async fn curator_factory() -> ZkCuratorFactory {
    let addrs = shared_standalone().await.unwrap_or_else(|e| panic!("{e}"));
    // A server from DISTLOCK_TEST_ZK_URL that is not on loopback cannot be
    // put behind a proxy: the outage case then reports itself not applicable.
    let proxied = !loopback_hosts(&zk_url(&addrs, "", "")).is_empty();
    ZkCuratorFactory::new(addrs, "/curator-suite", proxied)
}

// Not applicable, each reporting why:
// * locks live as long as the session (no per-lock expiry), as in the
//   store's own layout: abandoned_lock_is_freed_after_ttl,
//   loss_is_signalled_before_others_can_acquire,
//   stalled_leader_is_replaced_after_ttl, watch_reports_expiry;
// * keys are Curator's paths whatever the namespace (no namespaced_keys):
//   namespaces_isolate;
// * nothing lives under a namespace, so there is none to purge
//   (NotSupported): purging_a_namespace_spares_others;
// * InterProcessSemaphoreV2 stores no limit (each client passes its own):
//   semaphore_limit_mismatch_is_an_error.
lock_core::conformance_tests!(
    zookeeper_curator,
    curator_factory,
    not_applicable: [
        abandoned_lock_is_freed_after_ttl,
        loss_is_signalled_before_others_can_acquire,
        stalled_leader_is_replaced_after_ttl,
        watch_reports_expiry,
        namespaces_isolate,
        purging_a_namespace_spares_others,
        semaphore_limit_mismatch_is_an_error,
    ]
);
