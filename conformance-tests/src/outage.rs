//! [`ProxyOutage`]: the network outage of the conformance suite's
//! "server unreachable" case, made with fault proxies in front of a
//! store's servers.

use std::net::SocketAddr;
use std::sync::Arc;

use distlock::conformance::{async_trait, Outage};
use distlock::LockError;
use distlock_testkit::FaultProxy;

/// One fault proxy per server of a store; the locker under test connects
/// through them. [`Outage::begin`] resets every connection and refuses new
/// ones, [`Outage::end`] lets traffic through again.
#[derive(Debug)]
pub struct ProxyOutage(Arc<Vec<FaultProxy>>);

impl ProxyOutage {
    /// Starts a proxy in front of each of `targets` (loopback addresses).
    pub fn start(targets: &[SocketAddr]) -> Result<Self, LockError> {
        let proxies = targets
            .iter()
            .map(|target| FaultProxy::start(*target))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| LockError::backend("cannot start a fault proxy", e))?;
        Ok(Self(Arc::new(proxies)))
    }

    /// The proxies' addresses, in the order of the targets: what the
    /// locker's URL must name.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.0.iter().map(FaultProxy::addr).collect()
    }
}

#[async_trait]
impl Outage for ProxyOutage {
    async fn begin(&self) {
        // Cutting waits for each proxy's thread to confirm; keep that off
        // the test's runtime.
        let proxies = Arc::clone(&self.0);
        let _ = tokio::task::spawn_blocking(move || proxies.iter().for_each(FaultProxy::cut)).await;
    }

    async fn end(&self) {
        self.0.iter().for_each(FaultProxy::restore);
    }
}
