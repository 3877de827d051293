#![doc = include_str!("../README.md")]

mod scheme;

#[cfg(feature = "conformance")]
pub mod conformance;

use std::sync::Arc;

pub use lock_core::*;
pub use scheme::{Scheme, KNOWN_SCHEMES};

#[cfg(feature = "etcd")]
pub use lock_etcd;
#[cfg(feature = "file")]
pub use lock_file;
#[cfg(feature = "redis")]
pub use lock_redis;
#[cfg(feature = "zookeeper")]
pub use lock_zookeeper;

/// The environment variable [`from_env`] reads.
pub const URL_ENV: &str = "DISTLOCK_URL";

/// Opens a [`Locker`] on the store `url` names.
///
/// The scheme picks the backend (see [`Scheme`]); common query options are
/// `ttl`, `namespace`, `wait` and `connect_timeout`, plus each backend's
/// own. A bad URL, an unknown option, a bad value or a scheme whose cargo
/// feature is off gives [`LockError::InvalidConfig`] naming the problem.
/// Passwords in the URL never appear in errors.
pub async fn connect(url: &str) -> Result<Locker, LockError> {
    let parsed = LockUrl::parse(url)?;
    let scheme = Scheme::parse(parsed.scheme())?;
    let mut options = UrlOptions::parse(&parsed.url)?;
    let common = options.take_common()?;
    let backend = open_backend(scheme, &parsed, options, &common).await?;
    Ok(Locker::new(backend, common.locker_options()))
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

async fn open_backend(
    scheme: Scheme,
    url: &LockUrl,
    mut options: UrlOptions,
    common: &CommonOptions,
) -> Result<Arc<dyn Backend>, LockError> {
    let _ = (&mut options, common);
    match scheme {
        Scheme::Memory => {
            options.finish()?;
            Ok(Arc::new(MemoryBackend::from_url(&url.url)?))
        }
        #[cfg(feature = "file")]
        Scheme::File => {
            let config = lock_file::FileConfig::from_url(&url.url, &mut options)?;
            options.finish()?;
            Ok(Arc::new(lock_file::FileBackend::open(config)?))
        }
        #[cfg(feature = "redis")]
        Scheme::Redis | Scheme::RedisCluster | Scheme::Redlock => {
            let config = lock_redis::RedisConfig::from_url(url, &mut options, common)?;
            options.finish()?;
            lock_redis::open(config).await
        }
        #[cfg(feature = "etcd")]
        Scheme::Etcd => {
            let config = lock_etcd::EtcdConfig::from_url(url, &mut options, common)?;
            options.finish()?;
            lock_etcd::open(config).await
        }
        #[cfg(feature = "zookeeper")]
        Scheme::ZooKeeper => {
            let config = lock_zookeeper::ZkConfig::from_url(url, &mut options, common)?;
            options.finish()?;
            lock_zookeeper::open(config)
        }
        #[allow(unreachable_patterns)]
        other => Err(other.not_compiled()),
    }
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

    #[tokio::test]
    async fn scheme_dispatch_table() {
        let dir = tempfile::tempdir().unwrap();
        let file_url = format!("file://{}", dir.path().display());
        // (url, Ok(backend name) | Err(part of the message))
        let table: Vec<(String, Result<&str, &str>)> = vec![
            ("mem://".into(), Ok("mem")),
            ("mem://named?ttl=2s&namespace=ns".into(), Ok("mem")),
            (
                file_url.clone(),
                if cfg!(feature = "file") {
                    Ok("file")
                } else {
                    Err("`file` feature")
                },
            ),
            // With the feature on, each Redis URL fails in the Redis parser
            // (no server needed), which proves the dispatch reached it.
            (
                "redis://127.0.0.1:6379?colour=red".into(),
                if cfg!(feature = "redis") {
                    Err("unknown option `colour` for redis://")
                } else {
                    Err("`redis` feature")
                },
            ),
            (
                "rediss://127.0.0.1:6379?tls_ca_file=/nonexistent/ca.pem".into(),
                if cfg!(feature = "redis") {
                    Err("cannot read /nonexistent/ca.pem")
                } else {
                    Err("`redis` feature")
                },
            ),
            (
                "redis+cluster://a:1,b:2/3".into(),
                if cfg!(feature = "redis") {
                    Err("only database 0")
                } else {
                    Err("`redis` feature")
                },
            ),
            (
                "redlock://a:1,b:2,c:3?tls_ca_file=/x".into(),
                if cfg!(feature = "redis") {
                    Err("needs a TLS scheme")
                } else {
                    Err("`redis` feature")
                },
            ),
            // With the feature on, each etcd URL fails in the etcd parser
            // (no server needed), which proves the dispatch reached it.
            (
                "etcd://127.0.0.1:2379?colour=red".into(),
                if cfg!(feature = "etcd") {
                    Err("unknown option `colour` for etcd://")
                } else {
                    Err("`etcd` feature")
                },
            ),
            (
                "etcds://127.0.0.1:2379?ca_file=/nonexistent/ca.pem".into(),
                if cfg!(feature = "etcd") {
                    Err("cannot read /nonexistent/ca.pem")
                } else {
                    Err("`etcd` feature")
                },
            ),
            // With the feature on, each ZooKeeper URL fails in the ZooKeeper
            // parser (no server needed): the dispatch reached it.
            (
                "zk://127.0.0.1:2181/app?colour=red".into(),
                if cfg!(feature = "zookeeper") {
                    Err("unknown option `colour` for zk://")
                } else {
                    Err("`zookeeper` feature")
                },
            ),
            (
                "zks://127.0.0.1:2181?tls_cert_file=/c.pem".into(),
                if cfg!(feature = "zookeeper") {
                    Err("`tls_cert_file` and `tls_key_file` go together")
                } else {
                    Err("`zookeeper` feature")
                },
            ),
            (
                "consul://x".into(),
                Err("unknown lock URL scheme `consul://`"),
            ),
            ("not a url".into(), Err("expected SCHEME://")),
            ("mem//x".into(), Err("expected SCHEME://")),
            ("mem://?ttl=abc".into(), Err("`ttl`")),
            ("mem://?ttl=0".into(), Err("`ttl`")),
            ("mem://?colour=red".into(), Err("unknown option `colour`")),
        ];
        let mut table = table;
        if cfg!(feature = "file") {
            table.push((
                format!("{file_url}?colour=red"),
                Err("unknown option `colour`"),
            ));
        }
        for (url, expected) in table {
            let result = connect(&url).await;
            match expected {
                Ok(name) => assert_eq!(result.unwrap().backend_name(), name, "{url}"),
                Err(part) => {
                    let reason = config_error(result);
                    assert!(reason.contains(part), "{url}: {reason}");
                }
            }
        }
    }

    #[tokio::test]
    async fn unknown_scheme_lists_the_known_ones() {
        let reason = config_error(connect("ftp://host").await);
        for scheme in KNOWN_SCHEMES {
            assert!(reason.contains(&format!("{scheme}://")), "{reason}");
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
