//! The benchmark floor: one lock+release as raw `SET NX PX` + `DEL`
//! round trips with the same client library, on a connection of its own.
//!
//! Like a raw spin lock, it deletes the key only where its `SET NX` took
//! it, and a call that did not take the lock fails: on a contended key
//! the floor's rate counts acquisitions, not refused attempts (the etcd
//! floor does the same).

use std::fmt;

use async_trait::async_trait;
use lock_core::{FloorProbe, LockError, LockName};

use crate::config::{RedisConfig, Topology};
use crate::conn::{self, Conn, Timeouts};
use crate::keys::LockKeys;

/// Lease of the floor's keys: long enough for a round trip, short enough
/// that a crashed benchmark leaves nothing behind for long.
const FLOOR_TTL_MS: u64 = 10_000;

/// Raw `SET key v NX PX` then, where it took the key, `DEL key`, on each
/// server given (all masters in parallel for Redlock, where a majority
/// must take it).
pub(crate) struct ConnFloorProbe {
    conns: Vec<Conn>,
    timeouts: Timeouts,
}

impl ConnFloorProbe {
    /// Opens new connections to the servers of `config`.
    pub(crate) async fn open(config: &RedisConfig) -> Result<Self, LockError> {
        let timeouts = Timeouts::new(config);
        let conns = match config.topology {
            Topology::Single | Topology::Redlock => config
                .nodes
                .iter()
                .map(|node| conn::lazy_manager(config, node).map(Conn::Single))
                .collect::<Result<Vec<_>, _>>()?,
            Topology::Cluster => vec![Conn::Cluster(conn::cluster(config).await?)],
        };
        Ok(Self { conns, timeouts })
    }
}

impl fmt::Debug for ConnFloorProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnFloorProbe")
            .field("servers", &self.conns.len())
            .finish()
    }
}

#[async_trait]
impl FloorProbe for ConnFloorProbe {
    fn describe(&self) -> String {
        match self.conns.len() {
            1 => "SET NX PX + DEL".to_owned(),
            n => format!("SET NX PX + DEL on {n} masters in parallel"),
        }
    }

    async fn lock_release_once(&self, name: &LockName) -> Result<(), LockError> {
        let key = LockKeys::new(name).lock;
        let mut set = redis::cmd("SET");
        set.arg(&key)
            .arg("floor")
            .arg("NX")
            .arg("PX")
            .arg(FLOOR_TTL_MS);
        let mut del = redis::cmd("DEL");
        del.arg(&key);
        let (set, del) = (&set, &del);
        let runs = self.conns.iter().map(|conn| async move {
            let taken: Option<String> = conn.query(self.timeouts, "floor SET", set).await?;
            if taken.is_none() {
                return Ok(false);
            }
            let _: i64 = conn.query(self.timeouts, "floor DEL", del).await?;
            Ok::<_, LockError>(true)
        });
        let mut taken = 0;
        for outcome in futures_util::future::join_all(runs).await {
            taken += usize::from(outcome?);
        }
        if taken * 2 <= self.conns.len() {
            return Err(LockError::Backend {
                message: "floor probe: the probe key was taken".to_owned(),
                source: None,
            });
        }
        Ok(())
    }
}
