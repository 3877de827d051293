//! The conformance suite against PostgreSQL, opened by URL through the
//! `distlock` facade: on the testkit's shared server (or
//! `DISTLOCK_TEST_PG_URL`'s), and through the testkit's PgBouncer in
//! transaction mode in front of a server of its own, with `listen_url`
//! naming that server for the LISTEN connection. A lock is taken away with
//! `force_release`; outages go through fault proxies in front of the
//! URL's host (behind PgBouncer, the bouncer: the LISTEN connection to the
//! server stays up).
//!
//! A hold lives as long as its locker's session row, which the locker
//! renews as a whole (no `per_lock_expiry`).

#[macro_use]
mod common;

use conformance_tests::StoreFactory;
use distlock_testkit::pgbouncer::shared_pgbouncer;
use distlock_testkit::postgres::{shared_postgres, shared_postgres_url, TEST_TIMEOUTS};
use distlock_testkit::{loopback_hosts, with_query};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};

async fn postgres_factory() -> StoreFactory {
    let url = shared_postgres_url()
        .await
        .expect("PostgreSQL for the suite");
    // A server from DISTLOCK_TEST_PG_URL that is not on loopback cannot be
    // put behind a proxy: the outage cases then report themselves not
    // applicable (and fail, as they are not pinned).
    StoreFactory::new(with_query(&url, TEST_TIMEOUTS)).outage_through(loopback_hosts(&url))
}

async fn pgbouncer_factory() -> StoreFactory {
    let bouncer = shared_pgbouncer().await.expect("PgBouncer for the suite");
    let server = shared_postgres().await.expect("PostgreSQL for the suite");
    let server_url = server.url();
    let listen = utf8_percent_encode(&server_url, NON_ALPHANUMERIC);
    let options = format!("{TEST_TIMEOUTS}&listen_url={listen}");
    let url = with_query(&bouncer.url(), &options);
    StoreFactory::new(&url).outage_through(loopback_hosts(&bouncer.url()))
}

conformance_tests_lacking!(postgres, postgres_factory, [per_lock_expiry]);
conformance_tests_lacking!(postgres_pgbouncer, pgbouncer_factory, [per_lock_expiry]);
