//! Why a `zks://` session could not be opened, in words.
//!
//! The client library reports a failed TLS handshake as a plain failure to
//! connect. When that happens, a handshake of our own with the same files
//! against the first host finds the reason (an untrusted server
//! certificate, a client certificate the server refused or missed), so the
//! error can name it.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use lock_core::url::{HostPort, TlsFiles};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

/// The TLS failure with `host`, if a handshake with `files` shows one
/// within `limit`; `None` when it succeeds or the server cannot be reached.
pub(crate) async fn tls_failure(
    files: TlsFiles,
    host: HostPort,
    limit: Duration,
) -> Option<String> {
    tokio::task::spawn_blocking(move || handshake(&files, &host, limit).err())
        .await
        .ok()
        .flatten()
}

fn handshake(files: &TlsFiles, host: &HostPort, limit: Duration) -> Result<(), String> {
    let config = Arc::new(client_config(files)?);
    let name = ServerName::try_from(host.host.clone()).map_err(|e| e.to_string())?;
    let addr = (host.host.as_str(), host.port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| format!("cannot resolve {host}"))?;
    // Unreachable: not a TLS matter; the caller's error says enough.
    let Ok(tcp) = TcpStream::connect_timeout(&addr, limit) else {
        return Ok(());
    };
    let _ = tcp.set_read_timeout(Some(limit));
    let _ = tcp.set_write_timeout(Some(limit));
    let connection = ClientConnection::new(config, name).map_err(|e| e.to_string())?;
    let mut tls = StreamOwned::new(connection, tcp);
    // A TLS 1.3 server checks the client's certificate after the client
    // considers the handshake done: its refusal arrives as an alert on the
    // first read, so write something harmless and read.
    let probe = b"\0\0\0\0";
    let result = tls.write_all(probe).and_then(|()| tls.read(&mut [0u8; 64]));
    match result {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Ok(()),
        Err(e) => match e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            Some(tls_error) => Err(in_words(tls_error, files.identity.is_some())),
            None => Ok(()),
        },
    }
}

/// The handshake's failure, saying which side refused what.
fn in_words(error: &rustls::Error, sent_a_certificate: bool) -> String {
    use rustls::AlertDescription::{
        BadCertificate, CertificateRequired, CertificateUnknown, UnknownCA,
    };
    match error {
        rustls::Error::AlertReceived(
            BadCertificate | CertificateRequired | CertificateUnknown | UnknownCA,
        ) => {
            if sent_a_certificate {
                format!("the server refused our client certificate ({error})")
            } else {
                format!("the server requires a client certificate and we sent none ({error})")
            }
        }
        rustls::Error::InvalidCertificate(_) => {
            format!("we do not trust the server's certificate: {error}")
        }
        _ => error.to_string(),
    }
}

fn client_config(files: &TlsFiles) -> Result<ClientConfig, String> {
    let mut roots = RootCertStore::empty();
    if let Some(ca) = &files.ca {
        for cert in CertificateDer::pem_slice_iter(ca.bytes()) {
            let cert = cert.map_err(|e| format!("tls_ca_file: {e}"))?;
            roots.add(cert).map_err(|e| format!("tls_ca_file: {e}"))?;
        }
    }
    let builder = ClientConfig::builder().with_root_certificates(roots);
    match &files.identity {
        None => Ok(builder.with_no_client_auth()),
        Some(identity) => {
            let chain = CertificateDer::pem_slice_iter(identity.cert.bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("tls_cert_file: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(identity.key.bytes())
                .map_err(|e| format!("tls_key_file: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("tls_cert_file/tls_key_file: {e}"))
        }
    }
}
