//! TLS in the probe (feature `tls`): a handshake with the URL's files
//! that says why it failed, the greeting over it, and telling a TLS port
//! from a plain one.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use super::hello::builder;
use super::second_look::unclear;
use super::socket::{connect, exchange, Exchange, Socket};
use super::{Finding, Protocol};
use crate::url::TlsFiles;

type TlsStream = StreamOwned<ClientConnection, TcpStream>;

impl Socket for TlsStream {
    fn tcp(&self) -> &TcpStream {
        &self.sock
    }
}

/// A TLS URL: handshake with `files`, then greet over TLS. A handshake
/// that fails for want of TLS on the other side is told apart by greeting
/// the port in plain.
pub(super) fn probe(
    protocol: &dyn Protocol,
    tcp: TcpStream,
    addr: SocketAddr,
    host: &str,
    files: &TlsFiles,
    limit: Duration,
) -> Finding {
    let identity = files.identity.is_some();
    let mut stream = match handshake(tcp, host, files, limit) {
        Ok(stream) => stream,
        Err(Failed::Tls(error)) => return refused(&error, identity),
        Err(Failed::Setup(finding)) => return finding,
        Err(Failed::Io) => return plain_instead(protocol, addr, limit),
    };
    match exchange(&mut stream, protocol, limit) {
        Exchange::Recognised => Finding::Answered,
        Exchange::Foreign(_) => Finding::OtherProtocol,
        // A TLS 1.3 server checks the client's certificate after the
        // client considers the handshake done: its refusal arrives here.
        Exchange::Broken(e) => match tls_error(&e) {
            Some(error) => refused(error, identity),
            None => Finding::Unreachable(super::io_words(&e)),
        },
        Exchange::Closed => Finding::Closed,
        Exchange::Silent => Finding::NoAnswer,
    }
}

/// The handshake did not complete: if the port answers the store's
/// greeting in plain, it does not speak TLS; otherwise judge it as a
/// plain port would be.
fn plain_instead(protocol: &dyn Protocol, addr: SocketAddr, limit: Duration) -> Finding {
    let Ok(mut tcp) = connect(addr, limit) else {
        return Finding::NoAnswer;
    };
    match exchange(&mut tcp, protocol, limit) {
        Exchange::Recognised => Finding::NotTls,
        Exchange::Foreign(_) => Finding::OtherProtocol,
        Exchange::Closed | Exchange::Broken(_) => unclear(addr, limit, Finding::Closed),
        Exchange::Silent => unclear(addr, limit, Finding::NoAnswer),
    }
}

/// Why a handshake did not complete.
enum Failed {
    /// TLS itself failed: a certificate, an alert, a protocol error.
    Tls(rustls::Error),
    /// The connection failed, closed or went silent.
    Io,
    /// The files or the host name cannot make a handshake at all.
    Setup(Finding),
}

fn handshake(
    tcp: TcpStream,
    host: &str,
    files: &TlsFiles,
    limit: Duration,
) -> Result<TlsStream, Failed> {
    let config = client_config(files).map_err(Failed::Setup)?;
    let name = ServerName::try_from(host.to_owned()).map_err(|_| {
        Failed::Setup(Finding::Tls {
            problem: format!("`{host}` cannot be checked against a certificate"),
            hint: "use a host name or an IP address".to_owned(),
        })
    })?;
    let connection = ClientConnection::new(Arc::new(config), name)
        .map_err(|e| Failed::Setup(setup_problem(e.to_string())))?;
    let _ = tcp.set_read_timeout(Some(limit));
    let mut stream = StreamOwned::new(connection, tcp);
    while stream.conn.is_handshaking() {
        if let Err(e) = stream.conn.complete_io(&mut stream.sock) {
            return Err(match tls_error(&e) {
                // Plain text where a TLS record should be: no TLS there.
                Some(rustls::Error::InvalidMessage(_)) => Failed::Io,
                Some(error) => Failed::Tls(error.clone()),
                None => Failed::Io,
            });
        }
    }
    Ok(stream)
}

/// The rustls error inside an I/O error, if that is what it is.
fn tls_error(error: &io::Error) -> Option<&rustls::Error> {
    error.get_ref()?.downcast_ref::<rustls::Error>()
}

/// A handshake refused by either side, in words and with what to change.
fn refused(error: &rustls::Error, sent_a_certificate: bool) -> Finding {
    use rustls::AlertDescription as Alert;
    use rustls::CertificateError as Cert;
    let (problem, hint) = match error {
        rustls::Error::InvalidCertificate(Cert::UnknownIssuer) => (
            "the server's certificate is not signed by a CA we trust",
            "set tls_ca_file to the CA that signed the server's certificate",
        ),
        rustls::Error::InvalidCertificate(Cert::NotValidForName | Cert::NotValidForNameContext { .. }) => (
            "the server's certificate is not issued for this host name",
            "connect by a name the certificate lists",
        ),
        rustls::Error::InvalidCertificate(
            Cert::Expired | Cert::ExpiredContext { .. } | Cert::NotValidYet | Cert::NotValidYetContext { .. },
        ) => (
            "the server's certificate has expired or is not valid yet",
            "renew the server's certificate, or check the clocks",
        ),
        rustls::Error::InvalidCertificate(_) => (
            "the server's certificate was rejected",
            "check the server's certificate and tls_ca_file",
        ),
        rustls::Error::AlertReceived(
            Alert::CertificateRequired | Alert::BadCertificate | Alert::UnknownCA | Alert::CertificateUnknown | Alert::HandshakeFailure,
        ) if !sent_a_certificate => (
            "the server requires a client certificate",
            "set tls_cert_file and tls_key_file",
        ),
        rustls::Error::AlertReceived(
            Alert::BadCertificate | Alert::UnknownCA | Alert::CertificateUnknown | Alert::CertificateExpired | Alert::AccessDenied,
        ) => (
            "the server refused our client certificate",
            "use a client certificate signed by a CA the server trusts (tls_cert_file, tls_key_file)",
        ),
        _ => (
            "the TLS handshake failed",
            "check tls_ca_file, tls_cert_file and tls_key_file, and that the server's TLS settings accept this client",
        ),
    };
    Finding::Tls {
        problem: problem.to_owned(),
        hint: hint.to_owned(),
    }
}

fn setup_problem(problem: String) -> Finding {
    Finding::Tls {
        problem,
        hint: "check tls_ca_file, tls_cert_file and tls_key_file".to_owned(),
    }
}

/// The client's TLS settings from the URL's files: the CA file's
/// certificates, else the system's roots; the client certificate if any.
fn client_config(files: &TlsFiles) -> Result<ClientConfig, Finding> {
    let mut roots = RootCertStore::empty();
    match &files.ca {
        Some(ca) => {
            for cert in CertificateDer::pem_slice_iter(ca.bytes()) {
                let cert = cert.map_err(|e| setup_problem(format!("tls_ca_file: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| setup_problem(format!("tls_ca_file: {e}")))?;
            }
        }
        None => {
            let _ = roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let builder = builder().with_root_certificates(roots);
    match &files.identity {
        None => Ok(builder.with_no_client_auth()),
        Some(identity) => {
            let chain = CertificateDer::pem_slice_iter(identity.cert.bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| setup_problem(format!("tls_cert_file: {e}")))?;
            let key = PrivateKeyDer::from_pem_slice(identity.key.bytes())
                .map_err(|e| setup_problem(format!("tls_key_file: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| setup_problem(format!("tls_cert_file and tls_key_file: {e}")))
        }
    }
}
