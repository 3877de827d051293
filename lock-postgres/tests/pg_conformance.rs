//! The conformance suite against a real PostgreSQL server (see
//! `common::pg_url`), opened through the store's plug-in. A lock is taken
//! away with `force_release`; outages go through a fault proxy in front
//! of the server. The cases pinned below are those the store
//! cannot run by design, or not yet (see the crate README's "State of
//! this crate").

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use distlock_testkit::proxy::FaultProxy;
use lock_core::conformance::{CaseSettings, LockerFactory, Outage};
use lock_core::open::open_store;
use lock_core::{LockError, Locker};
use lock_postgres::PgStore;

/// Lockers on the test server; for the outage cases, through a fault
/// proxy (the LISTEN connection included, as `listen_url` is absent).
struct PgFactory {
    url: String,
}

/// Short timeouts, so that an outage is seen within the cases' bounds.
const TIMEOUTS: &str = "connect_timeout=1s&response_timeout=2s";

impl PgFactory {
    fn url(&self, settings: &CaseSettings) -> String {
        let joiner = if self.url.contains('?') { '&' } else { '?' };
        format!(
            "{}{joiner}{TIMEOUTS}&namespace={}&ttl={}ms",
            self.url,
            settings.namespace.as_str(),
            settings.ttl.as_millis()
        )
    }
}

#[async_trait]
impl LockerFactory for PgFactory {
    async fn open(&self, settings: &CaseSettings) -> Result<Locker, LockError> {
        open_store::<PgStore>(&self.url(settings)).await
    }

    async fn open_with_outage(
        &self,
        settings: &CaseSettings,
    ) -> Option<Result<(Locker, Box<dyn Outage>), LockError>> {
        let target = loopback_server(&self.url)?;
        let proxy = match FaultProxy::start(target) {
            Ok(proxy) => Arc::new(proxy),
            Err(e) => return Some(Err(LockError::unavailable("fault proxy", e))),
        };
        let url = self
            .url(settings)
            .replace(&target.to_string(), &proxy.addr().to_string());
        let outage: Box<dyn Outage> = Box::new(ProxyOutage(proxy));
        Some(
            open_store::<PgStore>(&url)
                .await
                .map(|locker| (locker, outage)),
        )
    }
}

/// The server's address when the URL names it as `127.0.0.1:port` (the
/// proxy can only stand in front of a server it knows the address of).
fn loopback_server(url: &str) -> Option<SocketAddr> {
    let after = url.split("@127.0.0.1:").nth(1)?;
    let port = after.split(['/', '?']).next()?.parse().ok()?;
    Some(SocketAddr::from(([127, 0, 0, 1], port)))
}

/// An outage: the proxy cuts every connection and refuses new ones.
struct ProxyOutage(Arc<FaultProxy>);

#[async_trait]
impl Outage for ProxyOutage {
    async fn begin(&self) {
        let proxy = Arc::clone(&self.0);
        let _ = tokio::task::spawn_blocking(move || proxy.cut()).await;
    }

    async fn end(&self) {
        self.0.restore();
    }
}

async fn pg_factory() -> PgFactory {
    PgFactory {
        url: common::pg_url(),
    }
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
        // Not built yet: read-write locks and semaphores.
        cancelled_shared_requests_leave_nothing_behind,
        lost_fires_for_read_locks_and_permits,
        readers_share_and_writers_exclude,
        releasing_a_permit_lets_one_waiter_in,
        semaphore_limit_mismatch_is_an_error,
        semaphore_never_exceeds_its_limit,
        tokens_increase_across_read_and_write_guards,
        vanished_permit_returns_after_ttl,
        waiting_writer_is_not_overtaken_by_later_readers,
    ]
);
