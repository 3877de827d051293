#![doc = include_str!("../README.md")]
//!
//! ## Cargo features
#![doc = document_features::document_features!()]
// On docs.rs (nightly rustdoc), items behind a cargo feature are marked
// with it.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod stores;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use lock_core::{
    Election, FencingToken, HoldKind, HolderWatch, LeaderInfo, LeaderWatch, Leadership, LockError,
    LockGuard, LockInfo, LockKey, LockName, LockOptions, Locker, LockerOptions, LossReason,
    LossSignal, Namespace, OwnerId, Result, RwLock, Semaphore, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_NAMESPACE, DEFAULT_TTL, MAX_KEY_LEN, MAX_NAMESPACE_LEN, MAX_SEMAPHORE_LIMIT,
    MAX_VALUE_LEN, MIN_TTL,
};

/// The names of the metrics every lock records through the `metrics`
/// facade (cargo feature `metrics`, on by default), and what they mean.
pub use lock_core::telemetry;

/// Local `flock(2)` locks (`file:///dir`): settings for building a store
/// without a URL, and the embedded default directory.
#[cfg(feature = "file")]
pub mod file {
    pub use lock_file::{
        default_dir, fallback_dir, DefaultDir, FileConfig, FileStore, PERSISTENT_DIR,
    };
}

/// Redis, Redis Cluster, Redis Sentinel and Redlock (`redis://`,
/// `redis+cluster://`, `redis+sentinel://`, `redlock://` and their TLS
/// forms).
#[cfg(feature = "redis")]
pub mod redis {
    pub use lock_redis::{RedisConfig, RedisStore, Topology};
}

/// etcd v3 (`etcd://`, `etcds://`).
#[cfg(feature = "etcd")]
pub mod etcd {
    pub use lock_etcd::{EtcdConfig, EtcdStore};
}

/// ZooKeeper (`zk://`, `zks://`).
#[cfg(feature = "zookeeper")]
pub mod zookeeper {
    pub use lock_zookeeper::{DigestAuth, ZkConfig, ZkStore};
}

/// PostgreSQL (`postgres://`, `postgresql://`): the config, and the SQL
/// of the layout for operators who create it themselves
/// (`create_schema=false`).
#[cfg(feature = "postgres")]
pub mod postgres {
    pub use lock_postgres::{schema_sql, PgConfig, PgStore, SchemaName, SslMode, DEFAULT_SCHEMA};
}

/// The environment variable [`from_env`] reads.
pub const URL_ENV: &str = "DISTLOCK_URL";

/// Opens a [`Locker`] on the store `url` names.
///
/// The scheme picks the store among those compiled in (see [`schemes`]);
/// common query options are `ttl`, `namespace`, `wait` and
/// `connect_timeout`, plus each store's own. A bad URL, an unknown option,
/// a bad value or a scheme whose cargo feature is off gives
/// [`LockError::InvalidConfig`] naming the problem. A network store that
/// cannot be reached says which host, what failed and what to try:
/// [`LockError::Unavailable`] when it refused or did not answer,
/// [`LockError::InvalidConfig`] when the URL points at another kind of
/// server or its TLS settings cannot work, [`LockError::PermissionDenied`]
/// when it refused the credentials. Passwords in the URL never appear in
/// errors.
pub async fn connect(url: &str) -> Result<Locker, LockError> {
    let store = stores::store_for(lock_core::url::scheme_of(url)?)?;
    match store.connect {
        Some(connect) => connect(url).await,
        None => Err(store.not_compiled()),
    }
}

/// Opens the locker `DISTLOCK_URL` names; [`LockError::InvalidConfig`] if
/// it is unset.
pub async fn from_env() -> Result<Locker, LockError> {
    match std::env::var(URL_ENV) {
        Ok(url) if !url.trim().is_empty() => connect(url.trim()).await,
        _ => Err(LockError::invalid_config(format!(
            "{URL_ENV} is not set; set it to a lock URL such as file:///var/lock/myapp or redis://127.0.0.1:6379"
        ))),
    }
}

/// Opens a [`Locker`] on a store configured in code rather than by URL:
/// `S` is one of the stores of this build (`file::FileStore`,
/// `redis::RedisStore`, ...) and `config` its settings. The locker takes
/// its locks with `options`.
///
#[cfg_attr(feature = "file", doc = "```")]
#[cfg_attr(not(feature = "file"), doc = "```ignore")]
/// # async fn demo() -> Result<(), distlock::LockError> {
/// use distlock::file::{FileConfig, FileStore};
/// use distlock::LockerOptions;
///
/// let dir = std::env::temp_dir().join("distlock-open-example");
/// let locks = distlock::open::<FileStore>(FileConfig::new(&dir), LockerOptions::default()).await?;
/// locks.lock("nightly-report").await?.release().await?;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
///
/// Errors are those of the store's opening: [`LockError::Unavailable`]
/// for a store that connects at once and cannot, [`LockError::InvalidConfig`]
/// for settings it refuses (or a URL that points at another kind of
/// server), [`LockError::PermissionDenied`] for refused credentials.
pub async fn open<S: lock_core::backend::Store>(
    config: S::Config,
    options: LockerOptions,
) -> Result<Locker, LockError> {
    Ok(Locker::new(S::open(config).await?, options))
}

/// The URL schemes [`connect`] serves in this build (`mem`, `file`,
/// `redis`, ...), in the order of the stores.
pub fn schemes() -> Vec<&'static str> {
    stores::stores()
        .iter()
        .filter(|store| store.connect.is_some())
        .flat_map(|store| store.schemes.iter().copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_error(result: Result<Locker, LockError>) -> String {
        match result {
            Err(LockError::InvalidConfig { reason }) => reason,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    /// The outcome `connect(url)` must have: `expected` when the URL's store
    /// is compiled in, else the error naming the feature to enable.
    fn expected_in_this_build(url: &str, expected: Result<&str, &str>) -> Result<String, String> {
        let store = lock_core::url::scheme_of(url)
            .ok()
            .and_then(|scheme| stores::store_for(scheme).ok());
        match store {
            Some(store) if store.connect.is_none() => {
                Err(format!("`{}` feature", store.feature.unwrap_or_default()))
            }
            _ => expected.map(str::to_owned).map_err(str::to_owned),
        }
    }

    #[tokio::test]
    async fn scheme_dispatch_table() {
        let dir = tempfile::tempdir().unwrap();
        let file_url = format!("file://{}", dir.path().display());
        let file_with_option = format!("{file_url}?colour=red");
        // (url, Ok(backend name) | Err(part of the message)) with every
        // store compiled in. Each network URL fails in its store's parser
        // (no server needed), which proves the dispatch reached it.
        let table: Vec<(&str, Result<&str, &str>)> = vec![
            ("mem://", Ok("mem")),
            ("mem://named?ttl=2s&namespace=ns", Ok("mem")),
            (&file_url, Ok("file")),
            (&file_with_option, Err("unknown option `colour`")),
            (
                "redis://127.0.0.1:6379?colour=red",
                Err("unknown option `colour` for redis://"),
            ),
            (
                "rediss://127.0.0.1:6379?tls_ca_file=/nonexistent/ca.pem",
                Err("cannot read /nonexistent/ca.pem"),
            ),
            ("redis+cluster://a:1,b:2/3", Err("only database 0")),
            (
                "redlock://a:1,b:2,c:3?tls_ca_file=/x",
                Err("needs a TLS scheme"),
            ),
            (
                "etcd://127.0.0.1:2379?colour=red",
                Err("unknown option `colour` for etcd://"),
            ),
            (
                "etcds://127.0.0.1:2379?ca_file=/nonexistent/ca.pem",
                Err("cannot read /nonexistent/ca.pem"),
            ),
            (
                "zk://127.0.0.1:2181/app?colour=red",
                Err("unknown option `colour` for zk://"),
            ),
            (
                "zks://127.0.0.1:2181?tls_cert_file=/c.pem",
                Err("`tls_cert_file` and `tls_key_file` go together"),
            ),
            (
                "postgres://127.0.0.1:5432/app?colour=red",
                Err("unknown option `colour` for postgres://"),
            ),
            (
                "postgresql://app@127.0.0.1/app?schema=Bad-Name",
                Err("option `schema`"),
            ),
            ("consul://x", Err("unknown lock URL scheme `consul://`")),
            ("not a url", Err("expected SCHEME://")),
            ("mem//x", Err("expected SCHEME://")),
            ("mem://?ttl=abc", Err("`ttl`")),
            ("mem://?ttl=0", Err("`ttl`")),
            ("mem://?colour=red", Err("unknown option `colour`")),
        ];
        for (url, expected) in table {
            let result = connect(url).await;
            match expected_in_this_build(url, expected) {
                Ok(name) => assert_eq!(result.unwrap().backend_name(), name, "{url}"),
                Err(part) => {
                    let reason = config_error(result);
                    assert!(reason.contains(&part), "{url}: {reason}");
                }
            }
        }
    }

    /// With the `postgres` feature a PostgreSQL URL reaches the store's own
    /// parser; without it, the error names the feature to enable.
    #[tokio::test]
    async fn postgres_urls_reach_the_store_or_name_its_feature() {
        for url in [
            "postgres://app@db.invalid/app?colour=red",
            "postgresql://app@db.invalid/app?colour=red",
        ] {
            let reason = config_error(connect(url).await);
            let expected = if cfg!(feature = "postgres") {
                "unknown option `colour`"
            } else {
                "PostgreSQL locks are not compiled into this build: rebuild with the `postgres` feature"
            };
            assert!(reason.contains(expected), "{url}: {reason}");
        }
    }

    #[tokio::test]
    async fn unknown_scheme_lists_the_known_ones() {
        let reason = config_error(connect("ftp://host").await);
        for scheme in stores::stores().iter().flat_map(|s| s.schemes) {
            assert!(reason.contains(&format!("{scheme}://")), "{reason}");
        }
    }

    #[test]
    fn schemes_lists_exactly_the_compiled_in_stores() {
        let served = schemes();
        for (scheme, store) in [
            ("mem", "memory"),
            ("file", "file"),
            ("redis", "Redis"),
            ("rediss", "Redis"),
            ("redis+cluster", "Redis"),
            ("rediss+cluster", "Redis"),
            ("redlock", "Redis"),
            ("redlocks", "Redis"),
            ("redis+sentinel", "Redis"),
            ("rediss+sentinel", "Redis"),
            ("etcd", "etcd"),
            ("etcds", "etcd"),
            ("zk", "ZooKeeper"),
            ("zks", "ZooKeeper"),
            ("postgres", "PostgreSQL"),
            ("postgresql", "PostgreSQL"),
        ] {
            let entry = stores::store_for(scheme).unwrap();
            assert_eq!(entry.name, store, "{scheme}");
            assert_eq!(
                served.contains(&scheme),
                entry.connect.is_some(),
                "{scheme}"
            );
        }
    }

    #[tokio::test]
    async fn url_options_reach_the_locker() {
        let locker = connect("mem://opts?ttl=2s&namespace=billing&wait=250ms")
            .await
            .unwrap();
        assert_eq!(locker.options().ttl, std::time::Duration::from_secs(2));
        assert_eq!(locker.namespace().as_str(), "billing");
        assert_eq!(
            locker.options().wait,
            Some(std::time::Duration::from_millis(250))
        );
    }

    #[tokio::test]
    async fn bad_url_error_hides_the_password() {
        let reason = config_error(connect("redis://u:secret@host:99999999").await);
        assert!(!reason.contains("secret"), "{reason}");
    }
}
