//! `etcd://` and `etcds://` URLs → [`EtcdConfig`].
//!
//! ```text
//! etcd://[user:password@]host[:port][,host[:port]...][/]?option=value&...
//! etcds://...   (TLS; with tls_ca_file, and tls_cert_file + tls_key_file)
//! ```
//!
//! Options besides the common ones: `response_timeout` (each request,
//! default 5 s), `user` and `password` (instead of the URL's user info),
//! and for `etcds://` the PEM files `tls_ca_file` (required),
//! `tls_cert_file` and `tls_key_file` (also spelt `ca_file`, `cert_file`,
//! `key_file`), read when the URL is parsed. `layout` picks where locks
//! live and how they are taken: `distlock` (the default) or `concurrency`
//! (etcd's Go `concurrency` package, `etcdctl lock`/`elect`), which alone
//! takes `key_prefix`, prepended verbatim to every lock name.

use std::time::Duration;

use lock_core::url::{Secret, StoreUrl, TlsFiles, UrlCredentials};
use lock_core::LockError;

/// The port used when a host has none.
pub const DEFAULT_PORT: u16 = 2379;
/// How long one request may take when `response_timeout` is not given.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Everything needed to connect to an etcd cluster.
///
/// `Debug` shows the user name and file paths, never the password or a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdConfig {
    /// `http://host:port` or `https://host:port`, one per cluster member.
    pub endpoints: Vec<String>,
    /// TLS files (`etcds://` only); the CA file is always there.
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
    /// Where locks live in etcd's key space and how they are taken.
    pub layout: EtcdLayout,
}

/// Where locks live in etcd's key space (URL option `layout`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum EtcdLayout {
    /// distlock's own: queues under `distlock/<namespace>/`, read locks,
    /// semaphores (`layout=distlock`, the default).
    #[default]
    Distlock,
    /// etcd's Go `concurrency` Mutex and Election, `etcdctl lock` and
    /// `etcdctl elect` (`layout=concurrency`): the lock named `K` is the
    /// prefix `<key_prefix>K/`, whatever the locker's namespace, so those
    /// clients and distlock exclude each other.
    Concurrency {
        /// Prepended verbatim to every lock name (URL option
        /// `key_prefix`, default empty), as clientv3's `namespace`
        /// wrapper does.
        key_prefix: String,
    },
}

impl EtcdLayout {
    /// Reads options `layout` and `key_prefix`; `key_prefix` needs
    /// `layout=concurrency`.
    fn from_url(url: &mut StoreUrl) -> Result<Self, LockError> {
        let layout = url.options().take("layout");
        let key_prefix = url.options().take("key_prefix");
        match (layout.as_deref(), key_prefix) {
            (None | Some("distlock"), None) => Ok(Self::Distlock),
            (None | Some("distlock"), Some(_)) => Err(url.invalid(
                "option `key_prefix` needs `layout=concurrency` (distlock's own layout \
                 keeps locks under `distlock/<namespace>/`)",
            )),
            (Some("concurrency"), key_prefix) => Ok(Self::Concurrency {
                key_prefix: key_prefix.unwrap_or_default(),
            }),
            (Some(other), _) => Err(url.invalid(format!(
                "option `layout`: expected `distlock` or `concurrency`, got `{other}`"
            ))),
        }
    }
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
            layout: EtcdLayout::Distlock,
        }
    }

    /// Reads an `etcd://` or `etcds://` URL; called through
    /// `lock_core::open::parse`.
    pub(crate) fn from_url(url: &mut StoreUrl) -> Result<Self, LockError> {
        let hosts = url.hosts_with_port(DEFAULT_PORT)?;
        if !matches!(url.path(), "" | "/") {
            return Err(url.invalid(format!(
                "etcd URLs take no path (got `{}`); use the `namespace` option",
                url.path()
            )));
        }
        let tls = url.tls(&["etcds"])?;
        if let Some(files) = &tls {
            files.required_ca("etcds")?;
        }
        let scheme = if tls.is_some() { "https" } else { "http" };
        let endpoints = hosts.iter().map(|h| format!("{scheme}://{h}")).collect();
        let (user, password) = match url.credentials()? {
            UrlCredentials {
                user: None,
                password: Some(_),
            } => return Err(url.invalid("a password needs a user name")),
            UrlCredentials {
                user: Some(_),
                password: None,
            } => return Err(url.invalid("user name given without a password")),
            UrlCredentials { user, password } => (user, password),
        };
        let layout = EtcdLayout::from_url(url)?;
        Ok(Self {
            endpoints,
            tls,
            user,
            password,
            connect_timeout: url.common().connect_timeout,
            response_timeout: url.response_timeout(DEFAULT_RESPONSE_TIMEOUT)?,
            layout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_testkit::store_config::{url_config, url_refused};

    type Store = crate::EtcdStore;

    #[test]
    fn hosts_become_endpoints_with_the_default_port() {
        let c = url_config::<Store>("etcd://127.0.0.1");
        assert_eq!(c.endpoints, ["http://127.0.0.1:2379"]);
        let c = url_config::<Store>("etcd://a:1,b,[::1]:3/");
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
        let c = url_config::<Store>("etcd://h?connect_timeout=2s&response_timeout=750ms&ttl=3s");
        assert_eq!(c.connect_timeout, Duration::from_secs(2));
        assert_eq!(c.response_timeout, Duration::from_millis(750));
    }

    #[test]
    fn the_layout_and_its_key_prefix_are_read() {
        let c = url_config::<Store>("etcd://h");
        assert_eq!(c.layout, EtcdLayout::Distlock);
        let c = url_config::<Store>("etcd://h?layout=distlock");
        assert_eq!(c.layout, EtcdLayout::Distlock);
        let c = url_config::<Store>("etcd://h?layout=concurrency");
        let key_prefix = String::new();
        assert_eq!(c.layout, EtcdLayout::Concurrency { key_prefix });
        let c = url_config::<Store>("etcd://h?layout=concurrency&key_prefix=app%2F");
        let key_prefix = "app/".to_owned();
        assert_eq!(c.layout, EtcdLayout::Concurrency { key_prefix });
    }

    #[test]
    fn credentials_come_from_user_info_or_options() {
        let c = url_config::<Store>("etcd://al%40ice:p%3Ass@h:1");
        assert_eq!(c.user.as_deref(), Some("al@ice"));
        assert_eq!(c.password.as_ref().map(Secret::expose), Some("p:ss"));
        let c = url_config::<Store>("etcd://h?user=root&password=pw");
        assert_eq!(c.user.as_deref(), Some("root"));
        assert_eq!(c.password.unwrap().expose(), "pw");
    }

    #[test]
    fn tls_files_are_read_for_etcds() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["ca.pem", "cert.pem", "key.pem"] {
            std::fs::write(dir.path().join(name), format!("PEM {name}")).unwrap();
        }
        let d = dir.path().display();
        let c = url_config::<Store>(&format!(
            "etcds://h?ca_file={d}/ca.pem&cert_file={d}/cert.pem&key_file={d}/key.pem"
        ));
        assert_eq!(c.endpoints, ["https://h:2379"]);
        let tls = c.tls.clone().unwrap();
        assert_eq!(tls.ca.unwrap().contents.expose(), "PEM ca.pem");
        let identity = tls.identity.unwrap();
        assert_eq!(identity.cert.contents.expose(), "PEM cert.pem");
        assert_eq!(identity.key.contents.expose(), "PEM key.pem");
        let shown = format!("{c:?}");
        assert!(!shown.contains("PEM key.pem"), "{shown}");
        assert!(shown.contains("key.pem"), "{shown}");
        let c = url_config::<Store>(&format!("etcds://h?ca_file={d}/ca.pem"));
        assert_eq!(c.tls.unwrap().identity, None);
    }

    #[test]
    fn secrets_never_show() {
        let c = url_config::<Store>("etcd://root:hunter2@h");
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("root"), "{shown}");
        let c = url_config::<Store>("etcd://h?user=root&password=hunter2");
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn bad_urls_are_named_without_the_password() {
        for (text, part) in [
            ("etcd://u:pw1@h/app", "no path"),
            ("etcd://u:pw1@h?ca_file=/x", "needs the TLS scheme"),
            ("etcds://u:pw1@h?ca_file=/x&cert_file=/x", "go together"),
            ("etcds://u:pw1@h", "needs option `tls_ca_file`"),
            ("etcds://u:pw1@h?ca_file=/x&tls_ca_file=/y", "mean the same"),
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
            (
                "etcd://u:pw1@h?layout=curator",
                "expected `distlock` or `concurrency`",
            ),
            ("etcd://u:pw1@h?key_prefix=a", "needs `layout=concurrency`"),
        ] {
            let message = url_refused::<Store>(text);
            assert!(message.contains(part), "{text}: {message}");
            assert!(!message.contains("pw1"), "{text}: {message}");
        }
    }

    #[test]
    fn other_schemes_are_refused() {
        let reason = url_refused::<Store>("redis://h");
        assert!(
            reason.contains("not a scheme of the etcd store"),
            "{reason}"
        );
    }
}
