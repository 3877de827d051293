//! zookeeper: each kind of failure as the command reports it.

use super::*;
#[cfg(feature = "zookeeper-tls")]
use distlock_testkit::zookeeper::tls_standalone_spec;

/// ZooKeeper's requests have no timeout of their own: only the connect
/// timeout is short.
const ZK_FAST: &str = "connect_timeout=500ms";

const ZOOKEEPER: NetworkStore = NetworkStore::new("zk", "ZooKeeper", ZK_FAST);
/// The same against the TLS server: a JVM's TLS handshake on a loaded
/// machine can take longer than half a second, and the probe waits
/// as long as the URL's connect timeout.
#[cfg(feature = "zookeeper-tls")]
const ZK_TLS_FAST: &str = "connect_timeout=3s";

fn plain_host() -> String {
    host_of(&common::zookeeper_url("errors", ""))
}

/// The TLS server's secure port: client certificates required.
#[cfg(feature = "zookeeper-tls")]
fn tls_host() -> String {
    let server = tls_server("zookeeper-tls", tls_standalone_spec);
    format!("127.0.0.1:{}", server.ports()[1])
}

#[cfg(feature = "zookeeper-tls")]
fn tls_servers() -> TlsServers<'static> {
    TlsServers::new(("zk", "zks"), plain_host(), tls_host(), ZK_TLS_FAST)
}

connection_failure_tests!(ZOOKEEPER;
    at_a_redis_port: "redis" common::redis_url,
    at_an_etcd_port: "etcd" common::etcd_url);

/// The TLS failures, with the feature that compiles in `zks://`.
#[cfg(feature = "zookeeper-tls")]
mod tls {
    use super::*;

    tls_failure_tests!(tls_servers());
}

/// Nodes created with digest credentials are only for the same
/// credentials: another user's `status` is refused.
#[test]
fn acl_refusal() {
    let host = plain_host();
    let namespace = unique("acl");
    let query = format!("{ZK_FAST}&namespace={namespace}&ttl=30s");
    let alice = format!("zk://{host}/acl-errors?{query}&user=alice&password=alice-pw");
    let held = tempfile::tempdir().unwrap();
    let ready = held.path().join("ready");
    let script = format!("touch {}; sleep 30", ready.display());
    let mut holder = distlock_at(&alice, &["run", "k", "--", "sh", "-c", &script])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for(|| ready.exists(), "alice to hold the lock");
    let bob = format!("zk://{host}/acl-errors?{query}&user=bob&password=bob-pw");
    let line = assert_status_fails(
        &bob,
        Expected {
            code: 77,
            names: "/acl-errors/",
            cause: "not authorized",
            hint: "check the credentials in the lock URL",
        },
        Some("bob-pw"),
    );
    assert!(!line.contains("alice-pw"), "{line}");
    common::signal(holder.id(), libc::SIGTERM);
    common::wait(&mut holder);
}
