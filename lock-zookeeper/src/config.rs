//! Lock URL → [`ZkConfig`].
//!
//! ```text
//! zk://[user:password@]h1[:2181],h2[:2181],…[/chroot][?options]
//! zks://…                                     the same over TLS (feature `tls`)
//! ```
//!
//! The path is the base under which locks live (default
//! [`DEFAULT_BASE`]; with `layout=curator`, the root); it is created as
//! needed.
//! Options besides the common ones: `layout` (`distlock`, the default, or
//! `curator`: see [`Layout`]), `session_timeout` (default: the
//! `ttl`), `user` and `password` (digest auth, instead of user info in the
//! URL), and for `zks://` the PEM files `tls_ca_file` (required),
//! `tls_cert_file` and `tls_key_file`, read when the URL is parsed.

use percent_encoding::percent_decode_str;
use std::time::Duration;

use lock_core::url::{HostPort, Secret, StoreUrl, TlsFiles, UrlCredentials};
use lock_core::LockError;

use crate::layout::Layout;
use crate::names::DEFAULT_BASE;

/// The port used when a host names none.
pub const DEFAULT_PORT: u16 = 2181;

/// Digest credentials (`user:password`); `Debug` shows the user only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DigestAuth {
    /// The user name.
    pub user: String,
    password: Secret,
}

impl DigestAuth {
    /// Credentials for `user` with `password`.
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            user: user.into(),
            password: Secret::new(password),
        }
    }

    /// The `user:password` bytes ZooKeeper's digest scheme expects; for
    /// handing to a ZooKeeper client only.
    pub fn auth_bytes(&self) -> Vec<u8> {
        format!("{}:{}", self.user, self.password.expose()).into_bytes()
    }
}

/// Everything needed to reach a ZooKeeper ensemble. `Debug` shows no
/// password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZkConfig {
    /// The ensemble's servers, in URL order.
    pub hosts: Vec<HostPort>,
    /// Absolute base path of the lock tree (no trailing `/`, never `/`;
    /// empty for the root, which only [`Layout::Curator`] uses).
    pub base: String,
    /// Where locks live and how their nodes are named.
    pub layout: Layout,
    /// The session timeout asked of the server: how long a holder that
    /// vanished keeps its locks. The server may clamp it to its
    /// `[2, 20] × tickTime` range.
    pub session_timeout: Duration,
    /// How long opening a session, or waiting for a lost connection to
    /// come back before a call fails with `Unavailable`, may take.
    pub connect_timeout: Duration,
    /// Digest credentials; when set, every node is created readable and
    /// writable only by the same credentials.
    pub auth: Option<DigestAuth>,
    /// TLS files (`zks://` only); the CA file is always there.
    pub tls: Option<TlsFiles>,
}

impl ZkConfig {
    /// A plain-TCP configuration for `hosts` with the default base path,
    /// session timeout (30 s) and connect timeout (5 s), without auth.
    pub fn new(hosts: Vec<HostPort>) -> Self {
        Self {
            hosts,
            base: DEFAULT_BASE.to_owned(),
            layout: Layout::Distlock,
            session_timeout: lock_core::DEFAULT_TTL,
            connect_timeout: lock_core::DEFAULT_CONNECT_TIMEOUT,
            auth: None,
            tls: None,
        }
    }

    /// Reads a `zk://` or `zks://` URL; called through
    /// `lock_core::open::parse`. The session timeout defaults to the `ttl`.
    pub(crate) fn from_url(url: &mut StoreUrl) -> Result<Self, LockError> {
        let hosts = url.hosts_with_port(DEFAULT_PORT)?;
        let layout = match url.options().take(Layout::OPTION) {
            Some(value) => Layout::from_option(&value).map_err(|why| url.invalid(why))?,
            None => Layout::Distlock,
        };
        let session_timeout = url
            .options()
            .take_positive_duration("session_timeout")?
            .unwrap_or(url.common().ttl);
        let auth = match url.credentials()? {
            UrlCredentials {
                user: None,
                password: None,
            } => None,
            UrlCredentials {
                user: Some(user),
                password: Some(password),
            } if !password.expose().is_empty() => Some(DigestAuth { user, password }),
            _ => return Err(url.invalid("digest auth needs a user and a password")),
        };
        let tls = url.tls(&["zks"])?;
        if let Some(files) = &tls {
            files.required_ca("zks")?;
        }
        Ok(Self {
            hosts,
            base: base_path(url.path(), layout).map_err(|why| url.invalid(why))?,
            layout,
            session_timeout,
            connect_timeout: url.common().connect_timeout,
            auth,
            tls,
        })
    }

    /// The connect string for zookeeper-client: `h1:p1,h2:p2` (no chroot;
    /// paths are prefixed with [`base`](Self::base) by this crate).
    pub fn connect_string(&self) -> String {
        self.hosts
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The base path from a URL path: `""` and `"/"` give the layout's
/// default ([`DEFAULT_BASE`], or the root, `""`, for Curator's), others
/// must be valid absolute znode paths without a trailing `/`.
fn base_path(path: &str, layout: Layout) -> Result<String, String> {
    let path = path.trim_end_matches('/');
    if path.is_empty() {
        return Ok(match layout {
            Layout::Curator => String::new(),
            _ => DEFAULT_BASE.to_owned(),
        });
    }
    let decoded = percent_decode_str(path).decode_utf8_lossy().into_owned();
    let bad_segment = decoded
        .split('/')
        .skip(1)
        .find(|s| s.is_empty() || *s == "." || *s == ".." || s.chars().any(char::is_control));
    if let Some(segment) = bad_segment {
        return Err(format!(
            "chroot `{decoded}` has an invalid level `{segment}`"
        ));
    }
    if decoded == "/zookeeper" || decoded.starts_with("/zookeeper/") {
        return Err("chroot /zookeeper is reserved by ZooKeeper".to_owned());
    }
    Ok(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_testkit::store_config::{url_config, url_refused};

    type Store = crate::ZkStore;

    #[test]
    fn hosts_chroot_and_defaults() {
        let config = url_config::<Store>("zk://h1:2181,h2,[::1]:2182/apps/locks");
        assert_eq!(config.connect_string(), "h1:2181,h2:2181,[::1]:2182");
        assert_eq!(config.base, "/apps/locks");
        assert_eq!(config.session_timeout, lock_core::DEFAULT_TTL);
        assert_eq!(config.auth, None);
        assert_eq!(config.tls, None);
        assert_eq!(url_config::<Store>("zk://h").base, "/distlock");
        assert_eq!(url_config::<Store>("zk://h/").base, "/distlock");
        assert_eq!(url_config::<Store>("zk://h/a/b/").base, "/a/b");
    }

    #[test]
    fn layout_option_and_its_default_base() {
        assert_eq!(url_config::<Store>("zk://h").layout, Layout::Distlock);
        let config = url_config::<Store>("zk://h/?layout=curator");
        assert_eq!((config.layout, config.base.as_str()), (Layout::Curator, ""));
        assert_eq!(url_config::<Store>("zk://h?layout=curator").base, "");
        let config = url_config::<Store>("zk://h/svc?layout=curator");
        assert_eq!(config.base, "/svc");
        let config = url_config::<Store>("zk://h/x?layout=distlock");
        assert_eq!(
            (config.layout, config.base.as_str()),
            (Layout::Distlock, "/x")
        );
        let refused = url_refused::<Store>("zk://h?layout=kazoo");
        assert!(refused.contains("unknown layout `kazoo`"), "{refused}");
    }

    #[test]
    fn session_timeout_defaults_to_the_ttl() {
        let config = url_config::<Store>("zk://h?ttl=2s&connect_timeout=1s");
        assert_eq!(config.session_timeout, Duration::from_secs(2));
        assert_eq!(config.connect_timeout, Duration::from_secs(1));
        let config = url_config::<Store>("zk://h?ttl=2s&session_timeout=4s");
        assert_eq!(config.session_timeout, Duration::from_secs(4));
        assert!(url_refused::<Store>("zk://h?session_timeout=0s").contains("greater than zero"));
    }

    #[test]
    fn digest_auth_from_user_info_or_options() {
        let config = url_config::<Store>("zk://alice:s%3Acret@h/x");
        let auth = config.auth.unwrap();
        assert_eq!(auth.user, "alice");
        assert_eq!(auth.auth_bytes(), b"alice:s:cret");
        let config = url_config::<Store>("zk://h?user=bob&password=pw");
        assert_eq!(config.auth.unwrap().auth_bytes(), b"bob:pw");
        assert!(url_refused::<Store>("zk://h?user=bob").contains("user and a password"));
        assert!(url_refused::<Store>("zk://a:b@h?user=bob&password=pw").contains("twice"));
        assert!(url_refused::<Store>("zk://a@h").contains("user and a password"));
    }

    #[test]
    fn secrets_never_show() {
        let debug = format!("{:?}", url_config::<Store>("zk://alice:topsecret@h?ttl=2s"));
        assert!(debug.contains("alice"), "{debug}");
        for shown in [
            debug,
            url_refused::<Store>("zk://alice:topsecret@h/zookeeper"),
            url_refused::<Store>("zk://alice:topsecret@h?colour=red"),
        ] {
            assert!(!shown.contains("topsecret"), "{shown}");
        }
    }

    #[test]
    fn tls_files_need_zks() {
        let dir = std::env::temp_dir().join(format!("lock-zk-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["ca.pem", "c.pem", "k.pem"] {
            std::fs::write(dir.join(name), format!("PEM {name}")).unwrap();
        }
        let d = dir.display();
        let config = url_config::<Store>(&format!(
            "zks://h?tls_ca_file={d}/ca.pem&tls_cert_file={d}/c.pem&tls_key_file={d}/k.pem"
        ));
        let tls = config.tls.unwrap();
        assert_eq!(tls.ca.unwrap().path, dir.join("ca.pem"));
        assert_eq!(tls.identity.unwrap().key.path, dir.join("k.pem"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(url_refused::<Store>("zks://h").contains("needs option `tls_ca_file`"));
        assert!(url_refused::<Store>("zk://h?tls_ca_file=/ca.pem").contains("zks://"));
        assert!(url_refused::<Store>("zks://h?tls_cert_file=/c.pem").contains("go together"));
    }

    #[test]
    fn bad_urls_name_the_problem() {
        assert!(url_refused::<Store>("zk:///chroot").contains("no ZooKeeper host"));
        assert!(url_refused::<Store>("zk://h/a//b").contains("invalid level"));
        assert!(url_refused::<Store>("zk://h/zookeeper/x").contains("reserved"));
        assert!(url_refused::<Store>("zk://h?colour=red").contains("unknown option `colour`"));
        assert!(url_refused::<Store>("redis://h").contains("not a scheme of the ZooKeeper store"));
    }
}
