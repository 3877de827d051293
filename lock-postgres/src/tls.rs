//! TLS with rustls (ring), as libpq's `sslmode` asks:
//!
//! | sslmode | TLS | what is verified |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` | if the server offers it | nothing |
//! | `require` | always | nothing (the chain, if `tls_ca_file` is given, as libpq does with a root certificate) |
//! | `verify-ca` | always | the chain, against `tls_ca_file` or the system's roots |
//! | `verify-full` | always | the chain and the host name |
//!
//! Handshake signatures are checked in every mode. `tls_cert_file` and
//! `tls_key_file` give a client certificate.

use std::sync::Arc;

use lock_core::url::TlsFiles;
use lock_core::LockError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::{PgConfig, SslMode};

/// The TLS connector for `config` (used only when its sslmode asks).
pub(crate) fn connector(config: &PgConfig) -> Result<MakeRustlsConnect, LockError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier: Arc<dyn ServerCertVerifier> = match (config.sslmode, &config.tls.ca) {
        (SslMode::Disable | SslMode::Prefer, _) | (SslMode::Require, None) => {
            Arc::new(NoNameNoChain(Arc::clone(&provider)))
        }
        (SslMode::Require | SslMode::VerifyCa, _) => {
            Arc::new(ChainOnly(webpki(config, &provider)?))
        }
        (SslMode::VerifyFull, _) => webpki(config, &provider)?,
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("TLS", e))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let client = match &config.tls.identity {
        None => builder.with_no_client_auth(),
        Some(identity) => {
            let certs = certificates("tls_cert_file", identity.cert.bytes())?;
            let key = PrivateKeyDer::from_pem_slice(identity.key.bytes())
                .map_err(|e| invalid("option `tls_key_file`", e))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| invalid("options `tls_cert_file`/`tls_key_file`", e))?
        }
    };
    Ok(MakeRustlsConnect::new(client))
}

fn invalid(what: &str, error: impl std::fmt::Display) -> LockError {
    LockError::invalid_config(format!("{what}: {error}"))
}

fn certificates(option: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, LockError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(&format!("option `{option}`"), e))?;
    if certs.is_empty() {
        return Err(invalid(
            &format!("option `{option}`"),
            "no PEM certificate in it",
        ));
    }
    Ok(certs)
}

/// The standard verifier over `tls_ca_file`'s CAs, or the system's roots.
fn webpki(
    config: &PgConfig,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, LockError> {
    let roots = roots(&config.tls)?;
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider))
        .build()
        .map_err(|e| invalid("TLS roots", e))
}

fn roots(files: &TlsFiles) -> Result<RootCertStore, LockError> {
    let mut roots = RootCertStore::empty();
    match &files.ca {
        Some(ca) => {
            for cert in certificates("tls_ca_file", ca.bytes())? {
                roots
                    .add(cert)
                    .map_err(|e| invalid("option `tls_ca_file`", e))?;
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
            if roots.is_empty() {
                return Err(LockError::invalid_config(
                    "no system CA certificates found: give option `tls_ca_file`",
                ));
            }
        }
    }
    Ok(roots)
}

/// `verify-ca`: the chain is verified, the host name is not.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The chain is checked before the name: a name error means the
        // chain is good.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require` (without a CA file): encryption without
/// authentication of the server, as libpq does; signatures still checked.
#[derive(Debug)]
struct NoNameNoChain(Arc<CryptoProvider>);

impl ServerCertVerifier for NoNameNoChain {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
