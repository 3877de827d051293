//! TLS files named by a lock URL: `tls_ca_file`, `tls_cert_file`,
//! `tls_key_file`, read once when the URL is parsed.

use std::fmt;
use std::path::{Path, PathBuf};

use super::credentials::Secret;
use crate::error::LockError;

/// The option naming the CA certificates to trust.
pub const TLS_CA_FILE: &str = "tls_ca_file";
/// The option naming the client certificate.
pub const TLS_CERT_FILE: &str = "tls_cert_file";
/// The option naming the client certificate's private key.
pub const TLS_KEY_FILE: &str = "tls_key_file";

/// The TLS options with the older spellings some URLs still use
/// (`ca_file`, `cert_file`, `key_file`); both forms mean the same.
pub(crate) const TLS_OPTIONS: [(&str, &str); 3] = [
    (TLS_CA_FILE, "ca_file"),
    (TLS_CERT_FILE, "cert_file"),
    (TLS_KEY_FILE, "key_file"),
];

/// A PEM file read when the URL was parsed, remembered with its path.
/// `Debug` shows the path only.
#[derive(Clone, PartialEq, Eq)]
pub struct PemFile {
    /// Where it was read from (shown in `Debug` and errors).
    pub path: PathBuf,
    /// Its contents; a private key's are secret, so all are kept as one.
    pub contents: Secret,
}

impl PemFile {
    /// Reads the file `option` names.
    ///
    /// Errors: [`LockError::InvalidConfig`] naming the option and the path.
    pub fn read(option: &str, path: &Path) -> Result<Self, LockError> {
        let contents = std::fs::read_to_string(path).map_err(|e| {
            LockError::invalid_config(format!(
                "option `{option}`: cannot read {}: {e}",
                path.display()
            ))
        })?;
        Ok(Self {
            path: path.to_owned(),
            contents: Secret::new(contents),
        })
    }

    /// The contents as bytes, for handing to the client library only.
    pub fn bytes(&self) -> &[u8] {
        self.contents.expose().as_bytes()
    }
}

impl fmt::Debug for PemFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.path, f)
    }
}

/// A client certificate and its private key, for servers that
/// authenticate clients by certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIdentity {
    /// `tls_cert_file`: the certificate (chain).
    pub cert: PemFile,
    /// `tls_key_file`: its private key.
    pub key: PemFile,
}

/// The TLS files of a URL whose scheme asks for TLS. With no CA file, a
/// store trusts what its client library trusts by default (the system's
/// roots), or asks for one where its client has no default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// `tls_ca_file`: CA certificates to trust.
    pub ca: Option<PemFile>,
    /// `tls_cert_file` and `tls_key_file`, which go together.
    pub identity: Option<ClientIdentity>,
}

impl TlsFiles {
    /// The CA file, or an error naming the option for stores whose client
    /// has no default trust store.
    pub fn required_ca(&self, scheme: &str) -> Result<&PemFile, LockError> {
        self.ca.as_ref().ok_or_else(|| {
            LockError::invalid_config(format!(
                "{scheme}:// needs option `{TLS_CA_FILE}`: the CA that signed the servers' certificates"
            ))
        })
    }
}
