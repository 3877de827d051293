//! [`StoreUrl`] and [`parse`]: the one path from a lock URL to a store's
//! settings, shared by every store.

use std::path::Path;
use std::time::Duration;

use url::Url;

use super::credentials::UrlCredentials;
use super::lock_url::{HostPort, LockUrl};
use super::options::{CommonOptions, UrlOptions};
use super::redact::{redact, Redacted};
use super::tls::{
    ClientIdentity, PemFile, TlsFiles, TLS_CA_FILE, TLS_CERT_FILE, TLS_KEY_FILE, TLS_OPTIONS,
};
use crate::backend::Store;
use crate::error::LockError;
use crate::options::LockerOptions;

/// The option giving how long one request to the store may take.
pub const RESPONSE_TIMEOUT: &str = "response_timeout";

/// What [`parse`] read from a lock URL: the store's settings and the
/// locker's.
#[derive(Clone, Debug)]
pub struct Parsed<C> {
    /// The store's own settings.
    pub config: C,
    /// `ttl`, `namespace` and `wait`, for the [`Locker`](crate::Locker).
    pub locker: LockerOptions,
}

/// Reads `text` as a URL of store `S`: the scheme must be one of
/// [`S::SCHEMES`](Store::SCHEMES); the common options are taken; then
/// [`S::config`](Store::config) reads the rest, and any option left over is
/// an error naming it and listing the known ones.
///
/// Every error is [`LockError::InvalidConfig`] and shows the URL with its
/// credentials masked.
pub fn parse<S: Store>(text: &str) -> Result<Parsed<S::Config>, LockError> {
    let url = LockUrl::parse(text)?;
    if !S::SCHEMES.contains(&url.scheme()) {
        return Err(LockError::invalid_config(format!(
            "`{}://` is not a scheme of the {} store (it serves {})",
            url.scheme(),
            S::NAME,
            scheme_list(S::SCHEMES)
        )));
    }
    let mut options = UrlOptions::parse(&url.url)?;
    let common = options.take_common()?;
    let mut store_url = StoreUrl {
        store: S::NAME,
        shown: redact(text),
        url,
        options,
        common,
    };
    let config = S::config(&mut store_url)?;
    store_url.options.finish()?;
    Ok(Parsed {
        config,
        locker: store_url.common.locker_options(),
    })
}

/// `a://, b://` for messages.
pub(crate) fn scheme_list(schemes: &[&str]) -> String {
    schemes
        .iter()
        .map(|s| format!("{s}://"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A lock URL as a store's [`config`](Store::config) reads it: the scheme
/// (already known to be the store's), hosts, path, the common options, and
/// the store's own options to take. Shared readers give every store the
/// same option names and the same messages.
#[derive(Debug)]
pub struct StoreUrl {
    store: &'static str,
    url: LockUrl,
    options: UrlOptions,
    common: CommonOptions,
    shown: Redacted,
}

impl StoreUrl {
    /// The URL's scheme, one of the store's.
    pub fn scheme(&self) -> &str {
        self.url.scheme()
    }

    /// The URL with only its first host (user info, path, query intact).
    pub fn url(&self) -> &Url {
        &self.url.url
    }

    /// The URL's path (`""` or `"/…"`).
    pub fn path(&self) -> &str {
        self.url.url.path()
    }

    /// The URL's hosts, in order, with `default_port` where none is given.
    /// Fails unless there is at least one.
    pub fn hosts_with_port(&self, default_port: u16) -> Result<Vec<HostPort>, LockError> {
        if self.url.hosts.is_empty() {
            return Err(self.invalid(format!(
                "no {} host given ({}://host:{default_port})",
                self.store,
                self.scheme()
            )));
        }
        Ok(self
            .url
            .hosts
            .iter()
            .map(|h| HostPort::new(h.host.as_str(), h.port.unwrap_or(default_port)))
            .collect())
    }

    /// The options every store shares (`ttl`, `namespace`, `wait`,
    /// `connect_timeout`), already read.
    pub fn common(&self) -> &CommonOptions {
        &self.common
    }

    /// The store's own options, to take with the `take_*` methods.
    pub fn options(&mut self) -> &mut UrlOptions {
        &mut self.options
    }

    /// The URL with credentials masked, for messages.
    pub fn shown(&self) -> &str {
        self.shown.as_str()
    }

    /// An [`InvalidConfig`](LockError::InvalidConfig) error about this URL:
    /// `` `<masked URL>`: why ``.
    pub fn invalid(&self, why: impl std::fmt::Display) -> LockError {
        LockError::invalid_config(format!("`{}`: {why}", self.shown()))
    }

    /// The user name and password: URL user info or the `user` and
    /// `password` options, not both.
    pub fn credentials(&mut self) -> Result<UrlCredentials, LockError> {
        UrlCredentials::take(&self.url, &mut self.options)
            .map_err(|e| e.in_config(&format!("`{}`", self.shown())))
    }

    /// `response_timeout`: how long one request may wait for its reply
    /// (`default` when absent; zero is refused).
    pub fn response_timeout(&mut self, default: Duration) -> Result<Duration, LockError> {
        Ok(self
            .options
            .take_positive_duration(RESPONSE_TIMEOUT)?
            .unwrap_or(default))
    }

    /// The TLS files (`tls_ca_file`, `tls_cert_file`, `tls_key_file`, also
    /// spelt `ca_file`, `cert_file`, `key_file`), read now. `None` when the
    /// scheme is not one of `tls_schemes`; giving TLS options there is an
    /// error, as is a certificate without its key.
    pub fn tls(&mut self, tls_schemes: &[&str]) -> Result<Option<TlsFiles>, LockError> {
        let mut given = Vec::with_capacity(TLS_OPTIONS.len());
        for (name, alias) in TLS_OPTIONS {
            if let Some(path) = self.options.take_with_alias(name, alias)? {
                given.push((name, path));
            }
        }
        if !tls_schemes.contains(&self.scheme()) {
            return match given.first() {
                None => Ok(None),
                Some((name, _)) => {
                    let needs = match tls_schemes {
                        [only] => format!("the TLS scheme {only}://"),
                        many => format!("a TLS scheme ({})", scheme_list(many)),
                    };
                    Err(self.invalid(format!("option `{name}` needs {needs}")))
                }
            };
        }
        let path_of = |option: &str| {
            given
                .iter()
                .find(|(name, _)| *name == option)
                .map(|(_, path)| Path::new(path.as_str()))
        };
        let identity = match (path_of(TLS_CERT_FILE), path_of(TLS_KEY_FILE)) {
            (Some(cert), Some(key)) => Some(ClientIdentity {
                cert: PemFile::read(TLS_CERT_FILE, cert)?,
                key: PemFile::read(TLS_KEY_FILE, key)?,
            }),
            (None, None) => None,
            _ => {
                return Err(self.invalid(format!(
                    "options `{TLS_CERT_FILE}` and `{TLS_KEY_FILE}` go together"
                )))
            }
        };
        let ca = path_of(TLS_CA_FILE)
            .map(|path| PemFile::read(TLS_CA_FILE, path))
            .transpose()?;
        Ok(Some(TlsFiles { ca, identity }))
    }
}
