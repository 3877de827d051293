//! `sslmode` against a server with TLS on (a server of this binary's own,
//! with the testkit's certificates, which name `localhost` and
//! `127.0.0.1`; it also listens on `127.0.0.2`, a name the certificate
//! does not carry): which modes encrypt, and which certificates each
//! accepts. A second server presents a certificate of its CA issued for
//! `other.example` only, which `verify-full` must refuse by any name.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::unique;
use distlock_testkit::pki::Pki;
use distlock_testkit::postgres::PgServer;
use distlock_testkit::unprivileged::unprivileged_user;
use distlock_testkit::with_query;
use lock_core::open::open_store;
use lock_core::LockError;
use lock_postgres::PgStore;
use tokio::sync::OnceCell;
use tokio_postgres::NoTls;

/// This binary's TLS server, started on first use.
async fn tls_server() -> &'static PgServer {
    static SERVER: OnceCell<PgServer> = OnceCell::const_new();
    SERVER
        .get_or_init(|| start_tls_server("postgres-tls", Pki::shared()))
        .await
}

/// This binary's TLS server whose certificate, signed by the CA of the
/// [`Pki`] returned with it, names only `other.example`: valid and
/// trusted, but not for `127.0.0.1` or `localhost`.
async fn misnamed_server() -> (&'static PgServer, &'static Pki) {
    static PKI: std::sync::OnceLock<Pki> = std::sync::OnceLock::new();
    static SERVER: OnceCell<PgServer> = OnceCell::const_new();
    let pki = PKI.get_or_init(|| Pki::generate_for_server_names(&["other.example"]));
    let server = SERVER
        .get_or_init(|| start_tls_server("postgres-tls-other-name", pki))
        .await;
    (server, pki)
}

/// A server with TLS on and `pki`'s server certificate, listening on
/// `127.0.0.1` and `127.0.0.2`.
async fn start_tls_server(name: &str, pki: &Pki) -> PgServer {
    let dir = server_files(pki);
    let settings = vec![
        "ssl=on".to_owned(),
        format!("ssl_cert_file={}", dir.join("server.crt").display()),
        format!("ssl_key_file={}", dir.join("server.key").display()),
        // Also an address the certificate does not name.
        "listen_addresses=127.0.0.1,127.0.0.2".to_owned(),
    ];
    PgServer::start_with(name, settings)
        .await
        .unwrap_or_else(|e| panic!("a PostgreSQL server with TLS on: {e}"))
}

/// The server's certificate and key in a dir of their own that the
/// server's user can read (PostgreSQL wants the key readable by its owner
/// only, and owned by the user it runs as). Kept for the process's life.
fn server_files(pki: &Pki) -> PathBuf {
    let dir = tempfile::tempdir()
        .expect("a dir for the server's key")
        .keep();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let user = unprivileged_user().expect("the server's user");
    for (from, name, mode) in [
        (&pki.server_cert, "server.crt", 0o644),
        (&pki.server_key, "server.key", 0o600),
    ] {
        let to = dir.join(name);
        std::fs::copy(from, &to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode)).unwrap();
        if let Some(user) = user {
            std::os::unix::fs::chown(&to, Some(user.uid), Some(user.gid)).unwrap();
        }
    }
    dir
}

/// `server`'s URL on host `host`, with `query`.
fn url_on(server: &PgServer, host: &str, query: &str) -> String {
    let url = server.url();
    with_query(&url.replacen("@127.0.0.1:", &format!("@{host}:"), 1), query)
}

/// [`open_at`] the TLS server.
async fn open(host: &str, query: &str) -> Result<bool, LockError> {
    open_at(tls_server().await, host, query).await
}

/// Opens the store on `server` by `host` and takes a lock with `query`;
/// `Ok(encrypted)` says whether its connection uses TLS, as the server
/// sees it.
async fn open_at(server: &PgServer, host: &str, query: &str) -> Result<bool, LockError> {
    let app = unique("tls");
    let url = url_on(server, host, &format!("{query}&application_name={app}"));
    let locker = open_store::<PgStore>(&url).await?;
    let guard = locker.lock("k").await?;
    let (client, connection) = tokio_postgres::connect(&server.url(), NoTls).await.unwrap();
    tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = $1",
            &[&app],
        )
        .await
        .unwrap();
    guard.release().await?;
    Ok(row
        .get::<_, Option<bool>>(0)
        .expect("the store's connections are seen"))
}

/// `tls_ca_file` naming `ca`.
fn ca_option(ca: &Path) -> String {
    format!("tls_ca_file={}", ca.display())
}

#[tokio::test]
async fn each_sslmode_encrypts_as_libpq_does() {
    let ca = ca_option(&Pki::shared().ca);
    assert!(!open("127.0.0.1", "sslmode=disable").await.unwrap());
    assert!(open("127.0.0.1", "sslmode=prefer").await.unwrap());
    assert!(open("127.0.0.1", "sslmode=require").await.unwrap());
    // verify-ca checks the chain only: a name the certificate lacks is fine.
    for host in ["127.0.0.1", "127.0.0.2"] {
        let query = format!("sslmode=verify-ca&{ca}");
        assert!(open(host, &query).await.unwrap(), "{host}");
    }
    for host in ["localhost", "127.0.0.1"] {
        let query = format!("sslmode=verify-full&{ca}");
        assert!(open(host, &query).await.unwrap(), "{host}");
    }
}

/// `result` is the `InvalidConfig` error of a failed TLS handshake, whose
/// reason also says `why` (one of these words).
fn assert_handshake_refused(result: Result<bool, LockError>, why: &[&str]) {
    match result {
        Err(LockError::InvalidConfig { reason }) => {
            assert!(reason.contains("TLS handshake failed"), "{reason}");
            assert!(why.iter().any(|w| reason.contains(w)), "{reason}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[tokio::test]
async fn verification_refuses_what_it_must() {
    let pki = Pki::shared();
    // The certificate names `localhost` and `127.0.0.1`, not `127.0.0.2`.
    let query = format!("sslmode=verify-full&{}", ca_option(&pki.ca));
    assert_handshake_refused(
        open("127.0.0.2", &query).await,
        &["NotValidForName", "not valid for name"],
    );
    // A CA that signed nothing of the server's.
    for mode in ["verify-ca", "verify-full"] {
        let query = format!("sslmode={mode}&{}", ca_option(&pki.other_ca));
        assert_handshake_refused(
            open("localhost", &query).await,
            &["UnknownIssuer", "unknown issuer"],
        );
    }
}

/// A certificate signed by the trusted CA, valid, but issued for
/// `other.example`: `verify-full` refuses it by an IP address
/// (`127.0.0.1`) and by a DNS name (`localhost`), saying it is the name;
/// `verify-ca`, which checks the chain only, takes it, so the refusal is
/// the name's, not the chain's.
#[tokio::test]
async fn a_certificate_for_another_host_name_is_refused_by_verify_full() {
    let (server, pki) = misnamed_server().await;
    let ca = ca_option(&pki.ca);
    for host in ["127.0.0.1", "localhost"] {
        let query = format!("sslmode=verify-full&{ca}");
        assert_handshake_refused(open_at(server, host, &query).await, &["not valid for name"]);
        let query = format!("sslmode=verify-ca&{ca}");
        assert!(open_at(server, host, &query).await.unwrap(), "{host}");
    }
}
