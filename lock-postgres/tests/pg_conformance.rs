//! The conformance suite against a real PostgreSQL server (the testkit's
//! shared one, see `common::pg_url`), opened through the store's plug-in.
//! A lock is taken away with `force_release`; outages go through a fault
//! proxy in front of the server. The cases pinned below are those the
//! store cannot run by design.

mod common;

use common::factory::PgFactory;

async fn pg_factory() -> PgFactory {
    PgFactory::new(common::pg_url().await)
}

lock_core::conformance_tests!(
    postgres,
    pg_factory,
    not_applicable: [
        // By design: a hold lives as long as its locker's session.
        abandoned_lock_is_freed_after_ttl,
        loss_is_signalled_before_others_can_acquire,
        stalled_leader_is_replaced_after_ttl,
        watch_reports_expiry,
    ]
);
