//! `sslmode` against a server with TLS on (see `common::pg_tls_ca`; its
//! certificate names `localhost` and not `127.0.0.1`): which modes
//! encrypt, and which certificates each accepts.

mod common;

use common::{pg_tls_ca, pg_url, unique};
use distlock_testkit::pki::Pki;
use lock_core::open::open_store;
use lock_core::LockError;
use lock_postgres::PgStore;
use tokio_postgres::NoTls;

/// The test server's URL on host `host`, with `query`.
fn url_on(host: &str, query: &str) -> String {
    let url = pg_url();
    let at = url.find("127.0.0.1").expect("the test URL names 127.0.0.1");
    let url = format!("{}{host}{}", &url[..at], &url[at + "127.0.0.1".len()..]);
    format!("{url}?{query}")
}

/// Opens the store and takes a lock with `query`; `Ok(encrypted)` says
/// whether its connection uses TLS, as the server sees it.
async fn open(host: &str, query: &str) -> Result<bool, LockError> {
    let app = unique("tls");
    let locker =
        open_store::<PgStore>(&url_on(host, &format!("{query}&application_name={app}"))).await?;
    let guard = locker.lock("k").await?;
    let (client, connection) = tokio_postgres::connect(&pg_url(), NoTls).await.unwrap();
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

#[tokio::test]
async fn each_sslmode_encrypts_as_libpq_does() {
    let ca = pg_tls_ca();
    assert!(!open("127.0.0.1", "sslmode=disable").await.unwrap());
    assert!(open("127.0.0.1", "sslmode=prefer").await.unwrap());
    assert!(open("127.0.0.1", "sslmode=require").await.unwrap());
    let ca = format!("tls_ca_file={ca}");
    assert!(open("127.0.0.1", &format!("sslmode=verify-ca&{ca}"))
        .await
        .unwrap());
    assert!(open("localhost", &format!("sslmode=verify-full&{ca}"))
        .await
        .unwrap());
}

#[tokio::test]
async fn verification_refuses_what_it_must() {
    let ca = format!("tls_ca_file={}", pg_tls_ca());
    // The certificate names `localhost`, not the address.
    match open("127.0.0.1", &format!("sslmode=verify-full&{ca}")).await {
        Err(LockError::InvalidConfig { reason }) => {
            assert!(reason.contains("TLS handshake failed"), "{reason}")
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    // A CA that signed nothing of the server's.
    let pki = Pki::generate();
    let other = format!("tls_ca_file={}", pki.other_ca.display());
    for mode in ["verify-ca", "verify-full"] {
        let refused = open("localhost", &format!("sslmode={mode}&{other}")).await;
        match refused {
            Err(LockError::InvalidConfig { reason }) => {
                assert!(reason.contains("TLS handshake failed"), "{mode}: {reason}");
                assert!(
                    reason.contains("UnknownIssuer") || reason.contains("unknown issuer"),
                    "{reason}"
                );
            }
            other => panic!("{mode}: expected InvalidConfig, got {other:?}"),
        }
    }
}
