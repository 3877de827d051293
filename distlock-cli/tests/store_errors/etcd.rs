//! etcd: each kind of failure as the command reports it.

use super::*;
use distlock_testkit::etcd::{etcd_spec, etcd_tls_spec};
use etcd_client::{Client, Permission};

const ROOT_PASSWORD: &str = "etcd-root-pw";

fn plain_host() -> String {
    host_of(&common::etcd_url("errors", ""))
}

/// The TLS member: client certificates required.
fn tls_host() -> String {
    let pki = pki();
    let server = test_server(shared_server("etcd-tls", || {
        etcd_tls_spec(
            "etcd-tls",
            pki.ca.clone(),
            pki.server_cert.clone(),
            pki.server_key.clone(),
        )
    }));
    server.addr().to_string()
}

fn tls_servers() -> TlsServers<'static> {
    TlsServers {
        schemes: ("etcd", "etcds"),
        plain_host: plain_host(),
        tls_host: tls_host(),
        userinfo: "",
        query: FAST,
    }
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

fn wrong_protocol(host: &str) -> Expected<'_> {
    Expected {
        code: 2,
        names: host,
        cause: "the server there is not etcd",
        hint: "check the host and port in the URL",
    }
}

#[test]
fn refused_at_once() {
    // One endpoint: nothing to retry against, no waiting out the
    // response timeout.
    let took = assert_refused("etcd", "etcd", FAST);
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

#[test]
fn unreachable() {
    assert_unreachable("etcd", "etcd", FAST);
}

#[cfg(feature = "redis")]
#[test]
fn at_a_redis_port() {
    let host = host_of(&common::redis_url("errors", ""));
    assert_status_fails(
        &format!("etcd://{host}?{FAST}"),
        wrong_protocol(&host),
        None,
    );
}

#[cfg(feature = "zookeeper")]
#[test]
fn at_a_zookeeper_port() {
    let host = host_of(&common::zookeeper_url("errors", ""));
    assert_status_fails(
        &format!("etcd://{host}?{FAST}"),
        wrong_protocol(&host),
        None,
    );
}

#[test]
fn tls_at_a_plain_port() {
    tls_servers().tls_at_a_plain_port();
}

#[test]
fn plain_at_a_tls_port() {
    tls_servers().plain_at_a_tls_port();
}

#[test]
fn untrusted_server_certificate() {
    tls_servers().untrusted_server_certificate();
}

#[test]
fn missing_client_certificate() {
    tls_servers().missing_client_certificate();
}

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
