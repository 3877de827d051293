//! Lock URL → [`RedisConfig`].
//!
//! ```text
//! redis://[user:pass@]host[:port][/db][?options]        one instance
//! rediss://…                                            the same over TLS
//! redis+cluster://h1:p,h2:p[?options]                   Redis Cluster (seed nodes)
//! redlock://h1:p,h2:p,h3:p[?options]                    Redlock over independent masters
//! redis+sentinel://s1:p,s2:p/master[/db][?options]      the master Redis Sentinel names
//! ```
//!
//! `rediss+cluster://`, `redlocks://` and `rediss+sentinel://` use TLS
//! (to the sentinels and to the master alike). A sentinel URL's hosts are
//! sentinels (port 26379 by default); `sentinel_user` and
//! `sentinel_password` log in to them where they require it (the URL's
//! own credentials are the data nodes'). Options besides the
//! common ones: `response_timeout` (default 500 ms), `user`/`password`
//! (instead of the URL's user info; a password alone is `requirepass`),
//! and on TLS schemes `tls_ca_file` (CA certificates to trust instead of
//! the system's roots) and `tls_cert_file` with `tls_key_file` (a client
//! certificate, for servers started with `tls-auth-clients`).

use std::time::Duration;

use lock_core::url::{HostPort, Secret, StoreUrl, TlsFiles, UrlCredentials};
use lock_core::LockError;

/// The port used when a host names none.
pub const DEFAULT_PORT: u16 = 6379;
/// The port used for a sentinel when a host names none.
pub const DEFAULT_SENTINEL_PORT: u16 = 26379;
/// The response timeout used when the URL sets none.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);

/// The schemes that use TLS.
pub(crate) const TLS_SCHEMES: &[&str] =
    &["rediss", "rediss+cluster", "redlocks", "rediss+sentinel"];

/// How the Redis servers of a URL are used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One instance (`redis://`, `rediss://`).
    Single,
    /// Redis Cluster; the hosts are seed nodes (`redis+cluster://`).
    Cluster,
    /// Redlock: every host is an independent master (`redlock://`).
    Redlock,
    /// The master that Redis Sentinel names; the hosts are sentinels
    /// (`redis+sentinel://`), asked again whenever the master fails.
    Sentinel,
}

impl Topology {
    /// The topology a scheme of [`RedisStore`](crate::RedisStore) names.
    fn of_scheme(scheme: &str) -> Self {
        if scheme.ends_with("+cluster") {
            Self::Cluster
        } else if scheme.ends_with("+sentinel") {
            Self::Sentinel
        } else if scheme.starts_with("redlock") {
            Self::Redlock
        } else {
            Self::Single
        }
    }
}

/// Everything needed to reach the Redis servers of a lock URL.
///
/// `Debug` shows no password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisConfig {
    /// Single instance, cluster or Redlock.
    pub topology: Topology,
    /// The hosts, in URL order (one for [`Topology::Single`]; the
    /// sentinels for [`Topology::Sentinel`]).
    pub nodes: Vec<HostPort>,
    /// The master's name, for [`Topology::Sentinel`] (the URL's path).
    pub master_name: Option<String>,
    /// How to log in to the sentinels (`sentinel_user`,
    /// `sentinel_password`); empty when they require no login.
    pub sentinel_credentials: UrlCredentials,
    /// Database number (`/db`); always 0 for a cluster.
    pub db: i64,
    /// ACL user name.
    pub username: Option<String>,
    /// Password (ACL or `requirepass`).
    pub password: Option<Secret>,
    /// TLS files; `None` for plain TCP.
    pub tls: Option<TlsFiles>,
    /// How long connecting to one server may take.
    pub connect_timeout: Duration,
    /// How long one command may wait for its reply. A command that timed
    /// out may still run on the server later; see the crate docs.
    pub response_timeout: Duration,
}

impl RedisConfig {
    /// A plain-TCP configuration for `topology` over `nodes`, with default
    /// timeouts, no credentials and database 0.
    pub fn new(topology: Topology, nodes: Vec<HostPort>) -> Self {
        Self {
            topology,
            nodes,
            master_name: None,
            sentinel_credentials: UrlCredentials::default(),
            db: 0,
            username: None,
            password: None,
            tls: None,
            connect_timeout: lock_core::DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
        }
    }

    /// Reads a URL of one of [`RedisStore`](crate::RedisStore)'s schemes;
    /// called through `lock_core::open::parse`.
    pub(crate) fn from_url(url: &mut StoreUrl) -> Result<Self, LockError> {
        let topology = Topology::of_scheme(url.scheme());
        let default_port = match topology {
            Topology::Sentinel => DEFAULT_SENTINEL_PORT,
            _ => DEFAULT_PORT,
        };
        let nodes = url.hosts_with_port(default_port)?;
        if topology == Topology::Single && nodes.len() > 1 {
            return Err(url.invalid(format!(
                "{} hosts given; use redis+cluster:// for a cluster, redis+sentinel:// for sentinels or redlock:// for independent masters",
                nodes.len()
            )));
        }
        let (master_name, db) = match topology {
            Topology::Sentinel => {
                let (name, db) = parse_master_and_db(url.path()).map_err(|why| url.invalid(why))?;
                (Some(name), db)
            }
            _ => (None, parse_db(url.path()).map_err(|why| url.invalid(why))?),
        };
        let sentinel_credentials = UrlCredentials {
            user: url
                .options()
                .take("sentinel_user")
                .filter(|u| !u.is_empty()),
            password: url.options().take("sentinel_password").map(Secret::new),
        };
        if topology != Topology::Sentinel && !sentinel_credentials.is_empty() {
            return Err(url.invalid(
                "`sentinel_user` and `sentinel_password` apply to redis+sentinel:// only",
            ));
        }
        if db != 0 && topology == Topology::Cluster {
            return Err(url.invalid("Redis Cluster has only database 0"));
        }
        let UrlCredentials {
            user: username,
            password,
        } = url.credentials()?;
        Ok(Self {
            topology,
            nodes,
            master_name,
            sentinel_credentials,
            db,
            username,
            password,
            response_timeout: url.response_timeout(DEFAULT_RESPONSE_TIMEOUT)?,
            tls: url.tls(TLS_SCHEMES)?,
            connect_timeout: url.common().connect_timeout,
        })
    }

    /// How many masters must agree for a Redlock lock: a strict majority.
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }
}

fn parse_db(path: &str) -> Result<i64, String> {
    match path.trim_start_matches('/') {
        "" => Ok(0),
        db => db
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| format!("path `/{db}` is not a database number")),
    }
}

/// A sentinel URL's path: `/<master name>` or `/<master name>/<db>`.
fn parse_master_and_db(path: &str) -> Result<(String, i64), String> {
    let path = path.trim_start_matches('/');
    let (name, db) = path.split_once('/').unwrap_or((path, ""));
    let name = percent_encoding::percent_decode_str(name)
        .decode_utf8()
        .map_err(|_| "the master name is not UTF-8 after percent-decoding".to_owned())?;
    if name.is_empty() {
        return Err(
            "no master name given: redis+sentinel://sentinel:26379/<master name>[/db]".to_owned(),
        );
    }
    Ok((name.into_owned(), parse_db(db)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_testkit::store_config::{url_config, url_refused};

    type Store = crate::RedisStore;

    #[test]
    fn single_instance_defaults() {
        let c = url_config::<Store>("redis://127.0.0.1");
        assert_eq!(c.topology, Topology::Single);
        assert_eq!(c.nodes, [HostPort::new("127.0.0.1", 6379)]);
        assert_eq!(
            (c.db, c.username.clone(), c.password.clone(), c.tls.clone()),
            (0, None, None, None)
        );
        assert_eq!(c.response_timeout, DEFAULT_RESPONSE_TIMEOUT);
        assert_eq!(c.connect_timeout, lock_core::DEFAULT_CONNECT_TIMEOUT);
    }

    #[test]
    fn credentials_db_and_timeouts_are_read() {
        let c = url_config::<Store>(
            "redis://al%40ice:p%3Ass@h:7000/3?response_timeout=250ms&connect_timeout=2s&ttl=5s",
        );
        assert_eq!(c.username.as_deref(), Some("al@ice"));
        assert_eq!(c.password.as_ref().map(Secret::expose), Some("p:ss"));
        assert_eq!(c.db, 3);
        assert_eq!(c.nodes[0].port, 7000);
        assert_eq!(c.response_timeout, Duration::from_millis(250));
        assert_eq!(c.connect_timeout, Duration::from_secs(2));
        let password_only = url_config::<Store>("redis://:secret@h");
        assert_eq!(password_only.username, None);
        assert_eq!(password_only.password.unwrap().expose(), "secret");
    }

    #[test]
    fn debug_never_shows_the_password() {
        let c = url_config::<Store>("rediss://user:hunter2@h/1");
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("user"), "{shown}");
    }

    #[test]
    fn tls_schemes_and_ca_file() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "PEM ca").unwrap();
        let c = url_config::<Store>(&format!("rediss://h?tls_ca_file={}", ca.display()));
        let read = c.tls.unwrap().ca.unwrap();
        assert_eq!((read.path, read.contents.expose()), (ca, "PEM ca"));
        assert!(url_config::<Store>("rediss+cluster://a:1,b:2")
            .tls
            .is_some());
        assert!(url_config::<Store>("redlocks://a:1,b:2,c:3").tls.is_some());
        assert!(url_refused::<Store>("redis://h?tls_ca_file=/x").contains("TLS scheme"));
    }

    #[test]
    fn multi_host_schemes() {
        let cluster = url_config::<Store>("redis+cluster://a:1,b:2,c:3");
        assert_eq!(cluster.topology, Topology::Cluster);
        assert_eq!(cluster.nodes.len(), 3);
        let redlock = url_config::<Store>("redlock://a:1,b,c:3,d:4,e:5");
        assert_eq!(redlock.topology, Topology::Redlock);
        assert_eq!(redlock.nodes[1].port, DEFAULT_PORT);
        assert_eq!(redlock.quorum(), 3);
    }

    #[test]
    fn sentinel_urls() {
        let c = url_config::<Store>(
            "redis+sentinel://u:pw@s1,s2:5000/my%20master/2?sentinel_password=spw&sentinel_user=su",
        );
        assert_eq!(c.topology, Topology::Sentinel);
        assert_eq!(
            c.nodes,
            [
                HostPort::new("s1", DEFAULT_SENTINEL_PORT),
                HostPort::new("s2", 5000)
            ]
        );
        assert_eq!((c.master_name.as_deref(), c.db), (Some("my master"), 2));
        assert_eq!(c.password.as_ref().map(Secret::expose), Some("pw"));
        assert_eq!(c.sentinel_credentials.user.as_deref(), Some("su"));
        let sentinel_password = c.sentinel_credentials.password.as_ref();
        assert_eq!(sentinel_password.map(Secret::expose), Some("spw"));
        assert!(!format!("{c:?}").contains("spw"));
        let plain = url_config::<Store>("redis+sentinel://s/m");
        assert_eq!((plain.db, plain.sentinel_credentials.is_empty()), (0, true));
        assert!(url_config::<Store>("rediss+sentinel://s/m").tls.is_some());
    }

    #[test]
    fn bad_urls_name_the_problem_without_the_password() {
        for (text, part) in [
            ("redis://u:pw1@a:1,b:2", "redlock://"),
            ("redis://u:pw1@h/x", "database number"),
            ("redis://u:pw1@h/-1", "database number"),
            ("redis+cluster://u:pw1@a:1/2", "database 0"),
            ("redis://u:pw1@h?response_timeout=soon", "response_timeout"),
            ("redis://u:pw1@h?response_timeout=0s", "greater than zero"),
            ("redis://u:pw1@h?colour=red", "unknown option `colour`"),
            ("redis+sentinel://u:pw1@s", "no master name"),
            ("redis+sentinel://u:pw1@s/", "no master name"),
            ("redis+sentinel://u:pw1@s/m/x", "database number"),
            ("redis://u:pw1@h?sentinel_password=pw1", "redis+sentinel://"),
        ] {
            let message = url_refused::<Store>(text);
            assert!(message.contains(part), "{text}: {message}");
            assert!(!message.contains("pw1"), "{text}: {message}");
        }
    }
}
