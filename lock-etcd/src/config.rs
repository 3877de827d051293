//! `etcd://` and `etcds://` URLs → [`EtcdConfig`].
//!
//! ```text
//! etcd://[user:password@]host[:port][,host[:port]...][/]?option=value&...
//! etcds://...   (TLS; with ca_file, cert_file, key_file)
//! ```
//!
//! Options besides the common ones (`ttl`, `namespace`, `wait`,
//! `connect_timeout`): `response_timeout` (each request, default 5 s),
//! `user` and `password` (instead of the URL's user info), and for
//! `etcds://` `ca_file`, `cert_file` and `key_file` (PEM files, read when
//! the URL is parsed).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lock_core::{redacted, CommonOptions, LockError, LockUrl, Secret, UrlCredentials, UrlOptions};

/// The port used when a host has none.
pub const DEFAULT_PORT: u16 = 2379;
/// How long one request may take when `response_timeout` is not given.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A PEM file read when the URL was parsed, remembered with its path.
#[derive(Clone, PartialEq, Eq)]
pub struct PemFile {
    /// Where it was read from (shown in `Debug` and errors).
    pub path: PathBuf,
    /// Its contents; a private key's are secret.
    pub contents: Secret,
}

impl PemFile {
    fn read(option: &str, path: &Path) -> Result<Self, LockError> {
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
}

impl fmt::Debug for PemFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.path, f)
    }
}

/// TLS settings of an `etcds://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// `ca_file`: the CA that signed the servers' certificates (required:
    /// no system trust store is loaded, so servers are trusted only by it).
    pub ca: PemFile,
    /// `cert_file` and `key_file`: the client certificate and its key, for
    /// servers started with `--client-cert-auth`.
    pub identity: Option<(PemFile, PemFile)>,
}

/// Everything needed to connect to an etcd cluster.
///
/// `Debug` shows the user name and file paths, never the password or a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdConfig {
    /// `http://host:port` or `https://host:port`, one per cluster member.
    pub endpoints: Vec<String>,
    /// TLS files (`etcds://` only).
    pub tls: Option<TlsFiles>,
    /// User name for etcd's authentication.
    pub user: Option<String>,
    /// The user's password.
    pub password: Option<Secret>,
    /// Timeout of one TCP (and TLS) connection attempt.
    pub connect_timeout: Duration,
    /// Timeout of one request; also how long a call without a deadline
    /// (`try_lock`, release, inspect) keeps retrying an unavailable cluster.
    pub response_timeout: Duration,
}

impl EtcdConfig {
    /// A plain-text config for `endpoints` (`host:port`), with default timeouts.
    pub fn new<S: AsRef<str>>(endpoints: impl IntoIterator<Item = S>) -> Self {
        Self {
            endpoints: endpoints
                .into_iter()
                .map(|e| format!("http://{}", e.as_ref()))
                .collect(),
            tls: None,
            user: None,
            password: None,
            connect_timeout: lock_core::DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
        }
    }

    /// Reads an `etcd://` or `etcds://` URL: hosts, user info, and the
    /// options this backend knows (taken from `options`; the caller calls
    /// [`UrlOptions::finish`] afterwards). Errors are
    /// [`LockError::InvalidConfig`] and never contain the password.
    pub fn from_url(
        url: &LockUrl,
        options: &mut UrlOptions,
        common: &CommonOptions,
    ) -> Result<Self, LockError> {
        let shown = redacted(&url.url);
        let bad = |why: String| LockError::invalid_config(format!("`{shown}`: {why}"));
        let tls = match url.scheme() {
            "etcd" => false,
            "etcds" => true,
            other => return Err(bad(format!("`{other}://` is not an etcd scheme"))),
        };
        if url.hosts.is_empty() {
            return Err(bad("no host given".into()));
        }
        if !matches!(url.url.path(), "" | "/") {
            return Err(bad(format!(
                "etcd URLs take no path (got `{}`); use the `namespace` option",
                url.url.path()
            )));
        }
        let scheme = if tls { "https" } else { "http" };
        let endpoints = url
            .hosts
            .iter()
            .map(|h| {
                let host = if h.host.contains(':') {
                    format!("[{}]", h.host)
                } else {
                    h.host.clone()
                };
                format!("{scheme}://{host}:{}", h.port.unwrap_or(DEFAULT_PORT))
            })
            .collect();
        let (user, password) =
            credentials(url, options).map_err(|e| e.in_config(&format!("`{shown}`")))?;
        let response_timeout = options
            .take_positive_duration("response_timeout")?
            .unwrap_or(DEFAULT_RESPONSE_TIMEOUT);
        let tls_files = tls_files(options, tls).map_err(|e| match e {
            TlsError::Config(why) => bad(why),
            TlsError::Read(error) => error,
        })?;
        Ok(Self {
            endpoints,
            tls: tls_files,
            user,
            password,
            connect_timeout: common.connect_timeout,
            response_timeout,
        })
    }
}

/// The user and password (URL user info or options): etcd wants both or
/// neither.
fn credentials(
    url: &LockUrl,
    options: &mut UrlOptions,
) -> Result<(Option<String>, Option<Secret>), LockError> {
    let UrlCredentials { user, password } = UrlCredentials::take(url, options)?;
    match (&user, &password) {
        (None, Some(_)) => Err(LockError::invalid_config("a password needs a user name")),
        (Some(_), None) => Err(LockError::invalid_config(
            "user name given without a password",
        )),
        _ => Ok((user, password)),
    }
}

enum TlsError {
    Config(String),
    Read(LockError),
}

fn tls_files(options: &mut UrlOptions, tls: bool) -> Result<Option<TlsFiles>, TlsError> {
    let ca = options.take("ca_file");
    let cert = options.take("cert_file");
    let key = options.take("key_file");
    if !tls {
        if let Some(name) = [("ca_file", &ca), ("cert_file", &cert), ("key_file", &key)]
            .iter()
            .find_map(|(name, value)| value.is_some().then_some(*name))
        {
            return Err(TlsError::Config(format!(
                "option `{name}` needs the TLS scheme etcds://"
            )));
        }
        return Ok(None);
    }
    if cert.is_some() != key.is_some() {
        return Err(TlsError::Config(
            "options `cert_file` and `key_file` go together".into(),
        ));
    }
    let Some(ca) = ca else {
        return Err(TlsError::Config(
            "etcds:// needs option `ca_file`: the CA that signed the servers' certificates".into(),
        ));
    };
    let read = |option: &str, path: String| {
        PemFile::read(option, Path::new(&path)).map_err(TlsError::Read)
    };
    let ca = read("ca_file", ca)?;
    let identity = match cert.zip(key) {
        Some((cert, key)) => Some((read("cert_file", cert)?, read("key_file", key)?)),
        None => None,
    };
    Ok(Some(TlsFiles { ca, identity }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<EtcdConfig, LockError> {
        let url = LockUrl::parse(text)?;
        let mut options = UrlOptions::parse(&url.url)?;
        let common = options.take_common()?;
        let config = EtcdConfig::from_url(&url, &mut options, &common)?;
        options.finish()?;
        Ok(config)
    }

    fn error(text: &str) -> String {
        match parse(text) {
            Err(LockError::InvalidConfig { reason }) => reason,
            other => panic!("{text}: expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn hosts_become_endpoints_with_the_default_port() {
        let c = parse("etcd://127.0.0.1").unwrap();
        assert_eq!(c.endpoints, ["http://127.0.0.1:2379"]);
        let c = parse("etcd://a:1,b,[::1]:3/").unwrap();
        assert_eq!(
            c.endpoints,
            ["http://a:1", "http://b:2379", "http://[::1]:3"]
        );
        assert_eq!(c.tls, None);
        assert_eq!(c.user, None);
        assert_eq!(c.response_timeout, DEFAULT_RESPONSE_TIMEOUT);
    }

    #[test]
    fn timeouts_are_read() {
        let c = parse("etcd://h?connect_timeout=2s&response_timeout=750ms&ttl=3s").unwrap();
        assert_eq!(c.connect_timeout, Duration::from_secs(2));
        assert_eq!(c.response_timeout, Duration::from_millis(750));
    }

    #[test]
    fn credentials_come_from_user_info_or_options() {
        let c = parse("etcd://al%40ice:p%3Ass@h:1").unwrap();
        assert_eq!(c.user.as_deref(), Some("al@ice"));
        assert_eq!(c.password.as_ref().map(Secret::expose), Some("p:ss"));
        let c = parse("etcd://h?user=root&password=pw").unwrap();
        assert_eq!(c.user.as_deref(), Some("root"));
        assert_eq!(c.password.unwrap().expose(), "pw");
    }

    #[test]
    fn tls_files_are_read_for_etcds() {
        let dir = std::env::temp_dir().join(format!("lock-etcd-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["ca.pem", "cert.pem", "key.pem"] {
            std::fs::write(dir.join(name), format!("PEM {name}")).unwrap();
        }
        let d = dir.display();
        let c = parse(&format!(
            "etcds://h?ca_file={d}/ca.pem&cert_file={d}/cert.pem&key_file={d}/key.pem"
        ))
        .unwrap();
        assert_eq!(c.endpoints, ["https://h:2379"]);
        let tls = c.tls.clone().unwrap();
        assert_eq!(tls.ca.contents.expose(), "PEM ca.pem");
        let (cert, key) = tls.identity.unwrap();
        assert_eq!(cert.contents.expose(), "PEM cert.pem");
        assert_eq!(key.contents.expose(), "PEM key.pem");
        let shown = format!("{c:?}");
        assert!(!shown.contains("PEM key.pem"), "{shown}");
        assert!(shown.contains("key.pem"), "{shown}");
        let c = parse(&format!("etcds://h?ca_file={d}/ca.pem")).unwrap();
        assert_eq!(c.tls.unwrap().identity, None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn secrets_never_show() {
        let c = parse("etcd://root:hunter2@h").unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("root"), "{shown}");
        let c = parse("etcd://h?user=root&password=hunter2").unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn bad_urls_are_named_without_the_password() {
        for (text, part) in [
            ("etcd://u:pw1@h/app", "no path"),
            ("etcd://u:pw1@h?ca_file=/x", "needs the TLS scheme"),
            ("etcds://u:pw1@h?ca_file=/x&cert_file=/x", "go together"),
            ("etcds://u:pw1@h", "needs option `ca_file`"),
            (
                "etcds://u:pw1@h?ca_file=/nonexistent/ca.pem",
                "cannot read /nonexistent/ca.pem",
            ),
            ("etcd://u:pw1@h?user=v", "not both"),
            ("etcd://h?password=pw1", "needs a user name"),
            ("etcd://u@h", "without a password"),
            ("etcd://u:pw1@h?response_timeout=soon", "response_timeout"),
            ("etcd://u:pw1@h?response_timeout=0s", "greater than zero"),
            ("etcd://u:pw1@h?colour=red", "unknown option `colour`"),
        ] {
            let message = error(text);
            assert!(message.contains(part), "{text}: {message}");
            assert!(!message.contains("pw1"), "{text}: {message}");
        }
    }

    #[test]
    fn other_schemes_are_refused() {
        let url = LockUrl::parse("redis://h").unwrap();
        let mut options = UrlOptions::parse(&url.url).unwrap();
        let common = options.take_common().unwrap();
        let error = EtcdConfig::from_url(&url, &mut options, &common).unwrap_err();
        assert!(error.to_string().contains("not an etcd scheme"), "{error}");
    }
}
