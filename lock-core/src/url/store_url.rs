//! [`StoreUrl`]: a lock URL as a store's config reads it, and [`Parsed`],
//! what reading it gave. [`parse`](crate::open::parse) drives both.

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
use crate::error::LockError;
use crate::options::LockerOptions;

/// The option giving how long one request to the store may take.
pub const RESPONSE_TIMEOUT: &str = "response_timeout";

/// What [`parse`](crate::open::parse) read from a lock URL: the store's settings and the
/// locker's.
#[derive(Clone, Debug)]
pub struct Parsed<C> {
    /// The store's own settings.
    pub config: C,
    /// `ttl`, `namespace` and `wait`, for the [`Locker`](crate::Locker).
    pub locker: LockerOptions,
}

/// `a://, b://` for messages.
pub(crate) fn scheme_list(schemes: &[&str]) -> String {
    schemes
        .iter()
        .map(|s| format!("{s}://"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A lock URL as a store's [`config`](crate::backend::Store::config) reads it: the scheme
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
    /// Reads `text` as a URL of the store called `store` (in messages),
    /// which serves `schemes`: the scheme must be one of them, and the
    /// common options are taken. Every error is
    /// [`LockError::InvalidConfig`] and shows the URL with its credentials
    /// masked.
    pub(crate) fn read(
        text: &str,
        store: &'static str,
        schemes: &[&str],
    ) -> Result<Self, LockError> {
        let url = LockUrl::parse(text)?;
        if !schemes.contains(&url.scheme()) {
            return Err(LockError::invalid_config(format!(
                "`{}://` is not a scheme of the {store} store (it serves {})",
                url.scheme(),
                scheme_list(schemes)
            )));
        }
        let mut options = UrlOptions::parse(&url.url)?;
        let common = options.take_common()?;
        Ok(Self {
            store,
            shown: redact(text),
            url,
            options,
            common,
        })
    }

    /// The locker's settings, once the store's config has taken its
    /// options: an option nobody took is an error naming it and the known
    /// ones.
    pub(crate) fn finish(self) -> Result<LockerOptions, LockError> {
        self.options.finish()?;
        Ok(self.common.locker_options())
    }

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
