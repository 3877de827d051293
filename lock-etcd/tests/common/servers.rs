//! Dedicated etcd servers, for tests that stop, restart or measure them:
//! a single member, lock URLs on members, which member of a cluster leads.

use std::net::SocketAddr;
use std::sync::Arc;

use distlock_testkit::etcd::{etcd_spec, etcd_url, raw_client, TEST_TIMEOUTS};
use distlock_testkit::{FaultProxy, Server};

/// A single-member cluster of its own, named `name`.
pub(crate) async fn single_member(name: &str) -> Server {
    etcd_spec(name, false).unwrap().start().await.unwrap()
}

/// A lock URL on the members at `addrs`, with session ttl `ttl` (`3s`),
/// in namespace `ns`, with the testkit's short timeouts.
pub(crate) fn url_for(addrs: impl IntoIterator<Item = SocketAddr>, ttl: &str, ns: &str) -> String {
    format!(
        "{}?ttl={ttl}&namespace={ns}&{TEST_TIMEOUTS}",
        etcd_url(addrs)
    )
}

/// A single member of its own behind a fault proxy, with lock URLs on
/// it through the proxy and straight.
#[allow(dead_code)] // only the fault tests cut the network
pub(crate) struct Proxied {
    /// The member.
    pub(crate) server: Server,
    /// The proxy in front of it.
    pub(crate) proxy: Arc<FaultProxy>,
    /// A lock URL through the proxy.
    pub(crate) through: String,
    /// A lock URL straight to the member.
    pub(crate) direct: String,
}

#[allow(dead_code)] // only the fault tests cut the network
impl Proxied {
    /// Cuts the network through the proxy (see [`FaultProxy::cut`]),
    /// off the runtime's threads.
    pub(crate) async fn cut(&self) {
        let proxy = Arc::clone(&self.proxy);
        tokio::task::spawn_blocking(move || proxy.cut())
            .await
            .unwrap();
    }
}

/// A single member named `name` behind a fault proxy, its URLs with
/// session ttl `ttl` in namespace `ns` (see [`url_for`]).
#[allow(dead_code)] // only the fault tests cut the network
pub(crate) async fn proxied_member(name: &str, ttl: &str, ns: &str) -> Proxied {
    let server = single_member(name).await;
    let proxy = Arc::new(FaultProxy::start(server.addr()).unwrap());
    let through = url_for([proxy.addr()], ttl, ns);
    let direct = url_for([server.addr()], ttl, ns);
    Proxied {
        server,
        proxy,
        through,
        direct,
    }
}

/// The index in `servers` of the member that is the cluster's leader.
#[allow(dead_code)] // only the fault tests stop the leader
pub(crate) async fn leader_index(servers: &[Server]) -> usize {
    for (i, server) in servers.iter().enumerate() {
        let url = etcd_url([server.addr()]);
        let Ok(client) = raw_client(&url).await else {
            continue;
        };
        let Ok(status) = client.maintenance_client().status().await else {
            continue;
        };
        let me = status.header().map(|h| h.member_id());
        if me == Some(status.leader()) {
            return i;
        }
    }
    panic!("no member is the leader");
}
