//! `etcds://` against a member that serves TLS only, requires client
//! certificates (`--client-cert-auth`) and has authentication enabled,
//! with certificates generated here by `rcgen`: the right credentials
//! work, wrong ones fail with an error that says why (and never shows the
//! password). A second member presents a certificate of the same CA
//! issued for another host name, which must be refused as such.

mod common;

use std::path::Path;
use std::time::Duration;

use common::connect;
use distlock_testkit::etcd::etcd_tls_spec;
use distlock_testkit::pki::Pki;
use distlock_testkit::{eventually, Server};
use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use lock_core::{LockError, LockOptions};
use tokio::sync::OnceCell;

const PASSWORD: &str = "s3cret-pw";

/// The member of this test binary: TLS, client certificates, and auth
/// enabled with user `root`.
async fn secure_member() -> &'static (Server, Pki) {
    static MEMBER: OnceCell<(Server, Pki)> = OnceCell::const_new();
    MEMBER
        .get_or_init(|| async {
            let pki = Pki::generate();
            let spec = etcd_tls_spec(
                "etcd-tls",
                pki.ca.clone(),
                pki.server_cert.clone(),
                pki.server_key.clone(),
            )
            .unwrap();
            let server = spec.start().await.unwrap();
            enable_auth(&server, &pki).await;
            (server, pki)
        })
        .await
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// Adds user `root` with the root role and turns authentication on, with
/// a plain client holding the client certificate.
async fn enable_auth(server: &Server, pki: &Pki) {
    let tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(read(&pki.ca)))
        .identity(Identity::from_pem(
            read(&pki.client_cert),
            read(&pki.client_key),
        ));
    let endpoint = format!("https://{}", server.addr());
    let options = ConnectOptions::new().with_tls(tls);
    let client = Client::connect([endpoint], Some(options)).await.unwrap();
    // The member may still be electing itself leader.
    eventually(
        Duration::from_secs(20),
        "the member to accept a user",
        || {
            let mut client = client.clone();
            async move { client.user_add("root", PASSWORD, None).await }
        },
    )
    .await
    .unwrap();
    let mut client = client;
    client.user_grant_role("root", "root").await.unwrap();
    client.auth_enable().await.unwrap();
}

/// `etcds://` URL of the member with `userinfo` and `query`.
fn url(server: &Server, userinfo: &str, query: &str) -> String {
    format!(
        "etcds://{userinfo}{}?ttl=2s&connect_timeout=1s&response_timeout=1s&{query}",
        server.addr()
    )
}

/// [`url`] logged in as `root` with the right password.
fn root_url(server: &Server, query: &str) -> String {
    url(server, &format!("root:{PASSWORD}@"), query)
}

fn files(ca: &Path, pki: &Pki) -> String {
    format!(
        "ca_file={}&cert_file={}&key_file={}",
        ca.display(),
        pki.client_cert.display(),
        pki.client_key.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_certificates_and_password_take_and_hand_over_locks() {
    let (server, pki) = secure_member().await;
    let url = root_url(server, &format!("namespace=tls&{}", files(&pki.ca, pki)));
    let a = connect(&url).await.unwrap();
    let b = connect(&url).await.unwrap();
    let guard = a.lock("k").await.unwrap();
    assert_eq!(
        b.inspect("k").await.unwrap().unwrap().owner,
        guard.owner().as_str()
    );
    // The hand-off goes through the watch stream: it works under auth too.
    let waiter = tokio::spawn(async move {
        let guard = b
            .lock_with("k", LockOptions::new().wait(Duration::from_secs(10)))
            .await?;
        guard.release().await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.release().await.unwrap();
    waiter.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_can_also_be_options() {
    let (server, pki) = secure_member().await;
    let query = format!(
        "user=root&password={PASSWORD}&namespace=tls-options&{}",
        files(&pki.ca, pki)
    );
    let locker = connect(&url(server, "", &query)).await.unwrap();
    locker.lock("k").await.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_refused_clearly() {
    let (server, pki) = secure_member().await;
    let url = url(server, "root:not-the-password@", &files(&pki.ca, pki));
    let error = connect(&url).await.unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, LockError::PermissionDenied { .. }),
        "{error:?}"
    );
    assert!(text.contains("refused the user name or password"), "{text}");
    assert!(!text.contains("not-the-password"), "{text}");
    assert!(!format!("{error:?}").contains("not-the-password"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credentials_are_refused_clearly() {
    let (server, pki) = secure_member().await;
    let locker = connect(&url(server, "", &files(&pki.ca, pki)))
        .await
        .unwrap();
    let error = locker.try_lock("k").await.unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, LockError::PermissionDenied { .. }),
        "{error:?}"
    );
    assert!(
        text.contains("permission") && text.contains("user and password"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_server_certificate_is_refused_clearly() {
    let (server, pki) = secure_member().await;
    let url = root_url(server, &files(&pki.other_ca, pki));
    let error = connect(&url).await.unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, LockError::InvalidConfig { .. }),
        "{error:?}"
    );
    assert!(
        text.contains(&format!("etcd at {}", server.addr()))
            && text.contains("TLS: the server's certificate is not signed by a CA we trust")
            && text.contains("set tls_ca_file"),
        "{text}"
    );
    assert!(!text.contains(PASSWORD), "{text}");
}

/// A member whose certificate, signed by the CA of the [`Pki`] returned
/// with it, names only `other.example`: valid and trusted, but not for
/// `127.0.0.1` or `localhost`. Without authentication: the handshake is
/// what must fail.
async fn misnamed_member() -> &'static (Server, Pki) {
    static MEMBER: OnceCell<(Server, Pki)> = OnceCell::const_new();
    MEMBER
        .get_or_init(|| async {
            let pki = Pki::generate_for_server_names(&["other.example"]);
            let spec = etcd_tls_spec(
                "etcd-tls-other-name",
                pki.ca.clone(),
                pki.server_cert.clone(),
                pki.server_key.clone(),
            )
            .unwrap();
            (spec.start().await.unwrap(), pki)
        })
        .await
}

/// Connecting by `127.0.0.1` (an IP address, checked against the
/// certificate's IP names) or by `localhost` (a DNS name) to a member
/// whose trusted certificate is for `other.example` is refused, saying it
/// is the name, not the CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_host_name_is_refused_clearly() {
    let (server, pki) = misnamed_member().await;
    for host in ["127.0.0.1", "localhost"] {
        let host = format!("{host}:{}", server.port());
        let url = format!(
            "etcds://{host}?ttl=2s&connect_timeout=1s&response_timeout=1s&{}",
            files(&pki.ca, pki)
        );
        let Err(error) = connect(&url).await else {
            panic!("connected to {host}, whose certificate is for other.example");
        };
        let text = error.to_string();
        assert!(
            matches!(error, LockError::InvalidConfig { .. }),
            "{error:?}"
        );
        assert!(
            text.contains(&format!("etcd at {host}"))
                && text.contains("TLS: the server's certificate is not issued for this host name")
                && text.contains("connect by a name the certificate lists"),
            "{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_client_certificate_is_refused_clearly() {
    let (server, pki) = secure_member().await;
    let query = format!("ca_file={}", pki.ca.display());
    let error = connect(&root_url(server, &query)).await.unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, LockError::InvalidConfig { .. }),
        "{error:?}"
    );
    assert!(
        text.contains("the server requires a client certificate")
            && text.contains("set tls_cert_file and tls_key_file"),
        "{text}"
    );
    assert!(!text.contains(PASSWORD), "{text}");
}
