//! etcd: each kind of failure as the command reports it.

use super::*;
use distlock_testkit::etcd::{etcd_spec, etcd_tls_spec};
use etcd_client::{Client, Permission};

const ROOT_PASSWORD: &str = "etcd-root-pw";

/// One endpoint: nothing to retry against, no waiting out the response
/// timeout, a refused connection is reported at once.
const ETCD: NetworkStore = NetworkStore {
    refused_within: Duration::from_secs(3),
    ..NetworkStore::new("etcd", "etcd", FAST)
};

fn plain_host() -> String {
    host_of(&common::etcd_url("errors", ""))
}

/// The TLS member: client certificates required.
fn tls_host() -> String {
    let server = tls_server("etcd-tls", |ca, cert, key| {
        etcd_tls_spec("etcd-tls", ca, cert, key)
    });
    server.addr().to_string()
}

fn tls_servers() -> TlsServers<'static> {
    TlsServers::new(("etcd", "etcds"), plain_host(), tls_host(), FAST)
}

/// A member with authentication on: user `root` ([`ROOT_PASSWORD`])
/// and user `guest` (password `guest-pw`), whose role may read and
/// write only keys under `elsewhere/`.
fn auth_host() -> String {
    let server = test_server(async {
        let server = shared_server("etcd-auth", || etcd_spec("etcd-auth", false)).await?;
        static ENABLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
        ENABLED
            .get_or_try_init(|| enable_auth(server))
            .await
            .map(|_| server)
    });
    server.addr().to_string()
}

async fn enable_auth(server: &Server) -> Result<(), String> {
    let endpoint = format!("http://{}", server.addr());
    let mut client = Client::connect([endpoint], None)
        .await
        .map_err(|e| e.to_string())?;
    let fail = |e: etcd_client::Error| e.to_string();
    distlock_testkit::eventually(Duration::from_secs(20), "a leader", || {
        let mut client = client.clone();
        async move { client.user_add("root", ROOT_PASSWORD, None).await }
    })
    .await?;
    client.user_grant_role("root", "root").await.map_err(fail)?;
    client.role_add("elsewhere").await.map_err(fail)?;
    let elsewhere = Permission::read_write("elsewhere/").with_prefix();
    client
        .role_grant_permission("elsewhere", elsewhere)
        .await
        .map_err(fail)?;
    client
        .user_add("guest", "guest-pw", None)
        .await
        .map_err(fail)?;
    client
        .user_grant_role("guest", "elsewhere")
        .await
        .map_err(fail)?;
    client.auth_enable().await.map_err(fail)?;
    Ok(())
}

connection_failure_tests!(ETCD;
    at_a_redis_port: "redis" common::redis_url,
    at_a_zookeeper_port: "zookeeper" common::zookeeper_url);

tls_failure_tests!(tls_servers());

#[test]
fn wrong_password() {
    let host = auth_host();
    assert_status_fails(
        &format!("etcd://root:not-the-root-pw@{host}?{FAST}"),
        Expected {
            code: 77,
            names: &host,
            cause: "etcd refused the user name or password",
            hint: "check them in the URL",
        },
        Some("not-the-root-pw"),
    );
}

#[test]
fn permission_refused() {
    let host = auth_host();
    let namespace = unique("guest");
    assert_status_fails(
        &format!("etcd://guest:guest-pw@{host}?{FAST}&namespace={namespace}"),
        Expected {
            code: 77,
            names: &host,
            cause: "etcd denied permission",
            hint: "give a user and password whose role may read and write keys under `distlock/`",
        },
        Some("guest-pw"),
    );
}
