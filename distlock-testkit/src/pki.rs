//! [`Pki`]: a certificate authority, server and client certificates as
//! PEM files in a temporary directory, for testing stores over TLS with
//! client authentication (feature `tls`).
//!
//! ```
//! let pki = distlock_testkit::pki::Pki::generate();
//! let ca = std::fs::read_to_string(&pki.ca).unwrap();
//! assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
//! ```

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// Certificates and keys as PEM files; removed with the value.
///
/// The server certificate names `127.0.0.1` and `localhost` (those of
/// [`Pki::generate_for_server_names`] name what they are given); the client
/// certificate is for client authentication, with common name
/// `distlock-client`. Both are signed by [`ca`](Self::ca).
#[derive(Debug)]
pub struct Pki {
    _dir: tempfile::TempDir,
    /// The CA that signed the server's and the client's certificates.
    pub ca: PathBuf,
    /// The server's certificate.
    pub server_cert: PathBuf,
    /// The server's private key.
    pub server_key: PathBuf,
    /// The client's certificate.
    pub client_cert: PathBuf,
    /// The client's private key.
    pub client_key: PathBuf,
    /// A CA that signed nothing: a client trusting only it must refuse
    /// the server.
    pub other_ca: PathBuf,
}

impl Pki {
    /// The URL options of a TLS client of these servers: `tls_ca_file`
    /// (`ca`, this PKI's [`ca`](Self::ca) or [`other_ca`](Self::other_ca))
    /// and, with `client_certificate`, `tls_cert_file` and
    /// `tls_key_file`.
    pub fn tls_options(&self, ca: &Path, client_certificate: bool) -> String {
        let mut query = format!("tls_ca_file={}", ca.display());
        if client_certificate {
            query.push_str(&format!(
                "&tls_cert_file={}&tls_key_file={}",
                self.client_cert.display(),
                self.client_key.display()
            ));
        }
        query
    }

    /// The certificates of this test binary: generated on the first call,
    /// the same ones afterwards (for a server the binary's tests share).
    ///
    /// # Panics
    ///
    /// As [`Pki::generate`].
    pub fn shared() -> &'static Pki {
        static SHARED: std::sync::OnceLock<Pki> = std::sync::OnceLock::new();
        SHARED.get_or_init(Pki::generate)
    }

    /// Generates fresh keys and certificates.
    ///
    /// # Panics
    ///
    /// If key generation or writing the temporary files fails.
    pub fn generate() -> Self {
        Self::generate_for_server_names(&["127.0.0.1", "localhost"])
    }

    /// Generates fresh keys and certificates as [`Pki::generate`] does,
    /// except that the server certificate names `server_names` (subject
    /// alternative names: host names or IP addresses) instead of
    /// `127.0.0.1` and `localhost`. With a name the clients do not
    /// connect by (`other.example`), it is a certificate that is valid
    /// and signed by the trusted [`ca`](Self::ca), but for another host:
    /// for testing that clients check the host name.
    ///
    /// # Panics
    ///
    /// As [`Pki::generate`].
    pub fn generate_for_server_names(server_names: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory for the PKI");
        let (ca_cert, issuer) = authority("distlock test CA");
        let (server_cert, server_key) = leaf(
            &issuer,
            server_names,
            "distlock-test-server",
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_cert, client_key) = leaf(
            &issuer,
            &[],
            "distlock-client",
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        let (other_ca, _) = authority("some other CA");
        let path = dir.path().to_owned();
        Self {
            ca: write(&path, "ca.pem", &ca_cert.pem()),
            server_cert: write(&path, "server.pem", &server_cert),
            server_key: write(&path, "server.key", &server_key),
            client_cert: write(&path, "client.pem", &client_cert),
            client_key: write(&path, "client.key", &client_key),
            other_ca: write(&path, "other-ca.pem", &other_ca.pem()),
            _dir: dir,
        }
    }
}

fn write(dir: &Path, name: &str, pem: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, pem).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

/// A self-signed CA named `name`.
fn authority(name: &str) -> (Certificate, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().expect("a CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key).expect("a self-signed CA");
    (cert, Issuer::new(params, key))
}

/// A certificate for `names` (subject alternative names) signed by
/// `issuer`, and its key, as PEM.
fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    names: &[&str],
    common_name: &str,
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let key = KeyPair::generate().expect("a key");
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names).expect("certificate parameters");
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.extended_key_usages = vec![usage];
    let cert = params
        .signed_by(&key, issuer)
        .expect("a signed certificate");
    (cert.pem(), key.serialize_pem())
}
