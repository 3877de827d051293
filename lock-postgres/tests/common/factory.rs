//! The conformance suite's lockers: on a server URL, or through a pooler
//! with the LISTEN connection elsewhere; for the outage cases, through a
//! fault proxy in front of the URL's host.

use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::{loopback_hosts, with_query};
use lock_core::conformance::{CaseSettings, LockerFactory, Outage};
use lock_core::open::open_store;
use lock_core::{LockError, Locker};
use lock_postgres::PgStore;

/// Timeouts short enough for an outage to be seen within the cases'
/// bounds, long enough for the logins of up to 40 lockers at once (each
/// with its pool) on a busy machine: with 1 s to connect, a pooled
/// connection was sometimes not made in time.
const TIMEOUTS: &str = "connect_timeout=3s&response_timeout=3s";

/// Lockers on `url` (options of its own appended to it).
pub(crate) struct PgFactory {
    url: String,
}

impl PgFactory {
    /// Lockers on `url`, which may carry options (`listen_url`, ...).
    pub(crate) fn new(url: String) -> Self {
        Self { url }
    }

    fn url(&self, settings: &CaseSettings) -> String {
        with_query(
            &self.url,
            &format!(
                "{TIMEOUTS}&namespace={}&ttl={}ms",
                settings.namespace.as_str(),
                settings.ttl.as_millis()
            ),
        )
    }
}

#[async_trait]
impl LockerFactory for PgFactory {
    async fn open(&self, settings: &CaseSettings) -> Result<Locker, LockError> {
        open_store::<PgStore>(&self.url(settings)).await
    }

    /// The proxy stands in front of the URL's host only: without
    /// `listen_url` the LISTEN connection goes through it too, with it
    /// that connection stays up (waits then still end by the re-check or
    /// a notification, never by a statement that reached the server).
    async fn open_with_outage(
        &self,
        settings: &CaseSettings,
    ) -> Option<Result<(Locker, Box<dyn Outage>), LockError>> {
        let target: SocketAddr = *loopback_hosts(&self.url).first()?;
        let proxy = match FaultProxy::start(target) {
            Ok(proxy) => Arc::new(proxy),
            Err(e) => return Some(Err(LockError::unavailable("fault proxy", e))),
        };
        let url = self
            .url(settings)
            .replacen(&target.to_string(), &proxy.addr().to_string(), 1);
        let outage: Box<dyn Outage> = Box::new(ProxyOutage(proxy));
        Some(
            open_store::<PgStore>(&url)
                .await
                .map(|locker| (locker, outage)),
        )
    }
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
