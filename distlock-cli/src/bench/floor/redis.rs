//! The Redis floor: raw `SET key v NX PX` then, where it took the key,
//! `DEL key`, on connections of its own that the store's config sets up
//! as the store's (a lazily connecting manager per server, or a cluster
//! connection; for Sentinel, the master the sentinels name when the floor
//! opens); Redlock runs on every master at once and needs a
//! majority.

use std::fmt;
use std::time::Duration;

use ::redis::aio::ConnectionManager;
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Cmd, RedisError};
use distlock::{LockError, LockName};
use lock_redis::{RedisStore, Topology};

use super::{escape, taken, Floor, FloorProbe, PAYLOAD};

/// Lease of the floor's keys: long enough for a round trip, short enough
/// that a crashed benchmark leaves nothing behind for long.
const FLOOR_TTL_MS: u64 = 10_000;

/// The floor of a Redis URL, with the store's connection settings.
pub(super) async fn open(url: &str) -> Result<Floor, LockError> {
    let config = lock_core::open::parse::<RedisStore>(url)?.config;
    let conns = match config.topology {
        Topology::Single | Topology::Redlock => config
            .nodes
            .iter()
            .map(|node| config.connection_manager(node).map(Conn::Single))
            .collect::<Result<_, _>>()?,
        Topology::Cluster => vec![Conn::Cluster(config.cluster_connection().await?)],
        Topology::Sentinel => vec![Conn::Single(config.sentinel_master().await?.1)],
    };
    Ok(Box::new(RedisFloor {
        conns,
        // A command may wait for a reconnect and then for its reply.
        limit: config.connect_timeout + config.response_timeout,
    }))
}

/// Where the floor writes for `name`: the store's key shape under a
/// prefix of its own (the store's keys all start `distlock:`), hash tag
/// included, so a cluster spreads the floor's keys as it spreads locks.
fn floor_key(name: &LockName) -> String {
    let (namespace, key) = (name.namespace().as_str(), name.key().as_str());
    format!("distlock-floor:{{{namespace}:{}}}", escape(key))
}

/// One server, or a cluster.
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

struct RedisFloor {
    conns: Vec<Conn>,
    limit: Duration,
}

impl RedisFloor {
    /// Runs `cmd` on `conn` within the store's bound for one command.
    async fn query<T: ::redis::FromRedisValue>(
        &self,
        conn: &Conn,
        cmd: &Cmd,
    ) -> Result<T, LockError> {
        let run = async {
            match conn.clone() {
                Conn::Single(mut c) => cmd.query_async(&mut c).await,
                Conn::Cluster(mut c) => cmd.query_async(&mut c).await,
            }
        };
        match tokio::time::timeout(self.limit, run).await {
            Ok(result) => result.map_err(|e| error("floor probe", e)),
            Err(_) => Err(LockError::Unavailable {
                message: format!("floor probe: no reply within {:?}", self.limit),
                source: None,
            }),
        }
    }
}

impl fmt::Debug for RedisFloor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisFloor")
            .field("servers", &self.conns.len())
            .finish()
    }
}

#[async_trait::async_trait]
impl FloorProbe for RedisFloor {
    fn describe(&self) -> String {
        match self.conns.len() {
            1 => "SET NX PX + DEL".to_owned(),
            n => format!("SET NX PX + DEL on {n} masters in parallel"),
        }
    }

    async fn lock_release_once(&self, name: &LockName) -> Result<(), LockError> {
        let key = floor_key(name);
        let mut set = ::redis::cmd("SET");
        set.arg(&key)
            .arg(PAYLOAD)
            .arg("NX")
            .arg("PX")
            .arg(FLOOR_TTL_MS);
        let mut del = ::redis::cmd("DEL");
        del.arg(&key);
        let (set, del) = (&set, &del);
        let runs = self.conns.iter().map(|conn| async move {
            let took: Option<String> = self.query(conn, set).await?;
            if took.is_none() {
                return Ok(false);
            }
            let _: i64 = self.query(conn, del).await?;
            Ok::<_, LockError>(true)
        });
        let mut took = 0;
        for outcome in futures_util::future::join_all(runs).await {
            took += usize::from(outcome?);
        }
        if took * 2 <= self.conns.len() {
            return Err(taken(format_args!("key `{key}`")));
        }
        Ok(())
    }

    fn describe_round_trip(&self) -> String {
        match self.conns.len() {
            1 => "GET".to_owned(),
            n => format!("GET on {n} masters in parallel"),
        }
    }

    async fn round_trip_once(&self, name: &LockName) -> Result<(), LockError> {
        let mut get = ::redis::cmd("GET");
        get.arg(floor_key(name));
        let get = &get;
        let runs = self
            .conns
            .iter()
            .map(|conn| async move { self.query::<Option<String>>(conn, get).await.map(drop) });
        futures_util::future::try_join_all(runs).await.map(drop)
    }
}

/// Network trouble is `Unavailable`, the rest `Backend`.
fn error(what: &str, error: RedisError) -> LockError {
    let message = format!("{what}: {error}");
    if error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
    {
        LockError::unavailable(message, error)
    } else {
        LockError::backend(message, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_key_is_outside_the_stores_keys() {
        let name = LockName::parse("billing", "invoices/2026").unwrap();
        let key = floor_key(&name);
        assert_eq!(key, "distlock-floor:{billing:invoices%2F2026}");
        assert!(!key.starts_with("distlock:"), "{key}");
    }

    #[tokio::test]
    async fn every_topology_opens_without_a_server() {
        for (url, describe, round_trip) in [
            ("redis://127.0.0.1:1", "SET NX PX + DEL", "GET"),
            (
                "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
                "SET NX PX + DEL on 3 masters in parallel",
                "GET on 3 masters in parallel",
            ),
        ] {
            let probe = super::super::open(url).await.unwrap().unwrap();
            assert_eq!(probe.describe(), describe);
            assert_eq!(probe.describe_round_trip(), round_trip);
        }
    }
}
