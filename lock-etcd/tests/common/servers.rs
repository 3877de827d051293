//! Dedicated etcd servers, for tests that stop, restart or measure them:
//! a single member, lock URLs on members, which member of a cluster leads.

use std::net::SocketAddr;

use distlock_testkit::etcd::{etcd_spec, etcd_url, raw_client, TEST_TIMEOUTS};
use distlock_testkit::Server;

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
