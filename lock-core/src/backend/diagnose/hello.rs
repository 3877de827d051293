//! A TLS hello sent to a port, to learn whether a TLS server is behind
//! it; and the TLS client settings every probe builds on.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use super::socket::{connect, looks_like_tls};

/// A client config builder on ring, without touching the process-wide
/// default provider.
pub(super) fn builder() -> rustls::ConfigBuilder<ClientConfig, rustls::WantsVerifier> {
    ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
}

/// Whether the server at `addr` answers a TLS hello with a TLS record
/// (a server hello or an alert) within `limit`. Nothing is verified: only
/// the first bytes of the answer are looked at.
pub(super) fn speaks_tls(addr: SocketAddr, limit: Duration) -> bool {
    let Ok(mut tcp) = connect(addr, limit) else {
        return false;
    };
    let config = builder()
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").expect("a valid name");
    let Ok(mut hello) = ClientConnection::new(Arc::new(config), name) else {
        return false;
    };
    while hello.wants_write() {
        if hello.write_tls(&mut tcp).is_err() {
            return false;
        }
    }
    let _ = tcp.set_read_timeout(Some(limit));
    let mut header = [0u8; 2];
    tcp.read_exact(&mut header).is_ok() && looks_like_tls(&header)
}
