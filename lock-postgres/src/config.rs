//! `postgres://` and `postgresql://` URLs → [`PgConfig`], with libpq's
//! conventions.
//!
//! ```text
//! postgres://[user[:password]@]host[:port][,host[:port]...][/dbname]?option=value&...
//! ```
//!
//! Options besides the common ones (`ttl`, `namespace`, `wait`,
//! `connect_timeout`): `response_timeout` (default 5 s), `user` and
//! `password` (instead of the user info), `sslmode` (`disable`,
//! `prefer` — the default, as in libpq —, `require`, `verify-ca`,
//! `verify-full`), the PEM files `tls_ca_file`, `tls_cert_file` and
//! `tls_key_file`, `application_name` (default `distlock`), `schema`
//! (default `distlock`), `create_schema` (default `true`) and
//! `listen_url` (another `postgres://` URL, percent-encoded, for the
//! connection that waits for notifications, e.g. one that bypasses a
//! transaction-mode pooler).

use std::time::Duration;

use lock_core::url::{HostPort, Secret, StoreUrl, TlsFiles};
use lock_core::LockError;
use percent_encoding::percent_decode_str;

use crate::schema::SchemaName;

/// The port used when a host has none.
pub const DEFAULT_PORT: u16 = 5432;
/// How long one statement may take when `response_timeout` is not given.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// The `application_name` the store's connections report by default.
pub const DEFAULT_APPLICATION_NAME: &str = "distlock";

/// libpq's `sslmode`: whether to use TLS and what to verify.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP only.
    Disable,
    /// TLS when the server offers it, without verifying the certificate
    /// (libpq's default).
    #[default]
    Prefer,
    /// TLS or nothing, without verifying the certificate.
    Require,
    /// TLS, the certificate chain verified against the CA, not the name.
    VerifyCa,
    /// TLS, the chain and the host name verified.
    VerifyFull,
}

impl SslMode {
    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            _ => return None,
        })
    }

    /// True for the modes that check the server's certificate.
    pub fn verifies(self) -> bool {
        matches!(self, Self::VerifyCa | Self::VerifyFull)
    }
}

/// Everything needed to reach the database and lay out the store in it.
///
/// `Debug` shows the user name and file paths, never the password or a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgConfig {
    /// The servers to try, in order (libpq's multi-host URLs).
    pub hosts: Vec<HostPort>,
    /// The database; `None` lets the server default it to the user name.
    pub dbname: Option<String>,
    /// The user to log in as; `None` means the process's user name
    /// (`$USER`), as libpq does.
    pub user: Option<String>,
    /// The user's password.
    pub password: Option<Secret>,
    /// Whether to use TLS and what to verify.
    pub sslmode: SslMode,
    /// TLS files: CA to trust (else the system's roots), client identity.
    pub tls: TlsFiles,
    /// The `application_name` the connections report.
    pub application_name: String,
    /// The schema holding the store's tables.
    pub schema: SchemaName,
    /// Whether to create missing tables on first use.
    pub create_schema: bool,
    /// Where the connection that LISTENs for notifications goes, when not
    /// to the same place as the others.
    pub listen: Option<Box<PgConfig>>,
    /// Timeout of one connection attempt.
    pub connect_timeout: Duration,
    /// Timeout of one statement; also how long a call without a deadline
    /// keeps retrying an unavailable server.
    pub response_timeout: Duration,
}

impl PgConfig {
    /// Reads a `postgres://` or `postgresql://` URL; called through
    /// `lock_core::open::parse`.
    pub(crate) fn from_url(url: &mut StoreUrl) -> Result<Self, LockError> {
        let hosts = url.hosts_with_port(DEFAULT_PORT)?;
        let dbname = dbname(url)?;
        let credentials = url.credentials()?;
        if credentials.user.is_none() && credentials.password.is_some() {
            return Err(url.invalid("a password needs a user name"));
        }
        let sslmode = match url.options().take("sslmode") {
            None => SslMode::default(),
            Some(text) => SslMode::parse(&text).ok_or_else(|| {
                url.invalid(format!(
                    "option `sslmode`: `{text}` is not one of disable, prefer, require, \
                     verify-ca, verify-full"
                ))
            })?,
        };
        let tls = url.tls(crate::SCHEMES)?.unwrap_or_default();
        if sslmode == SslMode::Disable && tls != TlsFiles::default() {
            return Err(url.invalid("TLS file options need an sslmode other than `disable`"));
        }
        let schema = match url.options().take("schema") {
            None => SchemaName::default(),
            Some(text) => SchemaName::new(&text)
                .map_err(|why| url.invalid(format!("option `schema`: {why}")))?,
        };
        let application_name = url
            .options()
            .take("application_name")
            .unwrap_or_else(|| DEFAULT_APPLICATION_NAME.to_owned());
        let create_schema = url.options().take_bool("create_schema")?.unwrap_or(true);
        let listen = listen_config(url)?;
        Ok(Self {
            hosts,
            dbname,
            user: credentials.user,
            password: credentials.password,
            sslmode,
            tls,
            application_name,
            schema,
            create_schema,
            listen,
            connect_timeout: url.common().connect_timeout,
            response_timeout: url.response_timeout(DEFAULT_RESPONSE_TIMEOUT)?,
        })
    }

    /// The config of the connection that LISTENs: `listen_url`'s, or this.
    pub fn listen_config(&self) -> &PgConfig {
        self.listen.as_deref().unwrap_or(self)
    }
}

/// The database named by the URL's path (`/dbname`, percent-decoded).
fn dbname(url: &StoreUrl) -> Result<Option<String>, LockError> {
    let path = url.path().strip_prefix('/').unwrap_or(url.path());
    if path.is_empty() {
        return Ok(None);
    }
    if path.contains('/') {
        return Err(url.invalid(format!(
            "the path names one database (`/dbname`), got `/{path}`"
        )));
    }
    let name = percent_decode_str(path)
        .decode_utf8()
        .map_err(|_| url.invalid("the database name is not UTF-8 after percent-decoding"))?;
    Ok(Some(name.into_owned()))
}

/// `listen_url`: a whole URL of the same store, read the same way; its
/// own locker options are not used, and it may not name another.
fn listen_config(url: &mut StoreUrl) -> Result<Option<Box<PgConfig>>, LockError> {
    let Some(text) = url.options().take("listen_url") else {
        return Ok(None);
    };
    let parsed = lock_core::open::parse::<crate::PgStore>(&text)
        .map_err(|e| e.in_config("option `listen_url`"))?;
    if parsed.config.listen.is_some() {
        return Err(url.invalid("option `listen_url`: its URL may not have one of its own"));
    }
    Ok(Some(Box::new(parsed.config)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_testkit::store_config::{url_config, url_refused};

    type Store = crate::PgStore;

    #[test]
    fn hosts_ports_and_dbname_follow_libpq() {
        let c = url_config::<Store>("postgres://db.example");
        assert_eq!(c.hosts, [HostPort::new("db.example", 5432)]);
        assert_eq!(c.dbname, None);
        assert_eq!(c.user, None);
        assert_eq!(c.sslmode, SslMode::Prefer);
        assert_eq!(c.schema.as_str(), "distlock");
        assert!(c.create_schema);
        assert_eq!(c.application_name, "distlock");
        assert_eq!(c.response_timeout, DEFAULT_RESPONSE_TIMEOUT);
        let c = url_config::<Store>("postgresql://a:1,b,[::1]:3/my%20db");
        assert_eq!(
            c.hosts,
            [
                HostPort::new("a", 1),
                HostPort::new("b", 5432),
                HostPort::new("::1", 3)
            ]
        );
        assert_eq!(c.dbname.as_deref(), Some("my db"));
    }

    #[test]
    fn credentials_come_from_user_info_or_options() {
        let c = url_config::<Store>("postgres://al%40ice:p%3Ass@h/db");
        assert_eq!(c.user.as_deref(), Some("al@ice"));
        assert_eq!(c.password.as_ref().map(Secret::expose), Some("p:ss"));
        let c = url_config::<Store>("postgres://h?user=app&password=pw");
        assert_eq!(c.user.as_deref(), Some("app"));
        assert_eq!(c.password.unwrap().expose(), "pw");
        let c = url_config::<Store>("postgres://app@h");
        assert_eq!((c.user.as_deref(), c.password), (Some("app"), None));
    }

    #[test]
    fn store_options_are_read() {
        let c = url_config::<Store>(
            "postgres://h/db?sslmode=disable&application_name=billing&schema=locks_2\
             &create_schema=false&ttl=3s&response_timeout=750ms&connect_timeout=2s",
        );
        assert_eq!(c.sslmode, SslMode::Disable);
        assert_eq!(c.application_name, "billing");
        assert_eq!(c.schema.as_str(), "locks_2");
        assert!(!c.create_schema);
        assert_eq!(c.response_timeout, Duration::from_millis(750));
        assert_eq!(c.connect_timeout, Duration::from_secs(2));
        for (mode, want) in [
            ("prefer", SslMode::Prefer),
            ("require", SslMode::Require),
            ("verify-ca", SslMode::VerifyCa),
            ("verify-full", SslMode::VerifyFull),
        ] {
            let c = url_config::<Store>(&format!("postgres://h?sslmode={mode}"));
            assert_eq!(c.sslmode, want);
        }
    }

    #[test]
    fn tls_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["ca.pem", "cert.pem", "key.pem"] {
            std::fs::write(dir.path().join(name), format!("PEM {name}")).unwrap();
        }
        let d = dir.path().display();
        let c = url_config::<Store>(&format!(
            "postgres://h?sslmode=verify-full&tls_ca_file={d}/ca.pem\
             &tls_cert_file={d}/cert.pem&tls_key_file={d}/key.pem"
        ));
        assert_eq!(c.tls.ca.clone().unwrap().contents.expose(), "PEM ca.pem");
        assert!(c.tls.identity.is_some());
        let shown = format!("{c:?}");
        assert!(!shown.contains("PEM key.pem"), "{shown}");
        assert!(shown.contains("key.pem"), "{shown}");
    }

    #[test]
    fn listen_url_is_a_url_of_the_same_store() {
        let c = url_config::<Store>(
            "postgres://u:pw1@bouncer:6432/db?listen_url=postgres%3A%2F%2Fu%3Apw2%40primary%2Fdb",
        );
        let listen = c.listen_config();
        assert_eq!(listen.hosts, [HostPort::new("primary", 5432)]);
        assert_eq!(listen.password.as_ref().map(Secret::expose), Some("pw2"));
        assert_eq!(c.hosts, [HostPort::new("bouncer", 6432)]);
        let shown = format!("{c:?}");
        assert!(!shown.contains("pw1") && !shown.contains("pw2"), "{shown}");
        let plain = url_config::<Store>("postgres://h");
        assert_eq!(plain.listen_config(), &plain);
    }

    #[test]
    fn secrets_never_show() {
        let c = url_config::<Store>("postgres://root:hunter2@h");
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("root"), "{shown}");
    }

    #[test]
    fn bad_urls_are_named_without_the_password() {
        for (text, part) in [
            ("postgres://u:pw1@h/a/b", "one database"),
            ("postgres://u:pw1@h?sslmode=maybe", "option `sslmode`"),
            ("postgres://u:pw1@h?schema=Bad-Name", "option `schema`"),
            ("postgres://u:pw1@h?schema=", "option `schema`"),
            ("postgres://u:pw1@h?create_schema=perhaps", "create_schema"),
            (
                "postgres://u:pw1@h?sslmode=disable&tls_ca_file=/dev/null",
                "other than `disable`",
            ),
            (
                "postgres://u:pw1@h?tls_ca_file=/nonexistent/ca.pem",
                "cannot read /nonexistent/ca.pem",
            ),
            ("postgres://u:pw1@h?tls_cert_file=/x", "go together"),
            ("postgres://u:pw1@h?user=v", "not both"),
            ("postgres://h?password=pw1", "needs a user name"),
            (
                "postgres://u:pw1@h?listen_url=redis%3A%2F%2Fh",
                "listen_url",
            ),
            (
                "postgres://u:pw1@h?response_timeout=0s",
                "greater than zero",
            ),
            ("postgres://u:pw1@h?colour=red", "unknown option `colour`"),
            ("postgres://u:pw1@/db", "empty host"),
        ] {
            let message = url_refused::<Store>(text);
            assert!(message.contains(part), "{text}: {message}");
            assert!(!message.contains("pw1"), "{text}: {message}");
        }
    }

    #[test]
    fn other_schemes_are_refused() {
        let reason = url_refused::<Store>("etcd://h");
        assert!(
            reason.contains("not a scheme of the PostgreSQL store"),
            "{reason}"
        );
    }
}
