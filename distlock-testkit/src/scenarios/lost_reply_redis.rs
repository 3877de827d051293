//! The Redis store's view for the [lost-reply scenario](super): what its
//! servers keep of a name and how many scripts they ran, read with raw
//! connections, on one server, a Sentinel master, a cluster or Redlock's
//! masters (feature `redis`).

use std::net::SocketAddr;

use lock_core::Locker;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;

use super::LostReplyStore;
use crate::layout::RedisKeys;

/// The commands that run the store's scripts, as `INFO commandstats`
/// names them.
const SCRIPT_COMMANDS: [&str; 6] = [
    "cmdstat_eval:",
    "cmdstat_evalsha:",
    "cmdstat_eval_ro:",
    "cmdstat_evalsha_ro:",
    "cmdstat_fcall:",
    "cmdstat_fcall_ro:",
];

/// Where a copy of a name's keys is read.
#[derive(Clone)]
enum KeysOn {
    /// One server (a single instance, a Sentinel master, a Redlock
    /// master).
    Server(MultiplexedConnection),
    /// A cluster, routed by the key's slot.
    Cluster(ClusterConnection),
}

/// A name's keys on one or more Redis servers, and the scripts they ran,
/// read from outside distlock.
///
/// The counter ([`LostReplyStore::mark`]) is the number of script calls
/// each server has run (`INFO commandstats`): every acquisition and every
/// clean-up is one, and nothing else the scenario does runs scripts (the
/// raw connections send plain commands; a holder's renewal comes a third
/// of its ttl after it took the lock). A server frozen with the request
/// queued runs it first when resumed, before the clean-up sent behind it
/// on the same connection, so a count that moved shows the late request
/// applied.
///
/// What is kept ([`LostReplyStore::kept`]): the lock key (0 or 1), its
/// waiters, readers, permits and permit waiters (the entries of the
/// `…:waiters` and `…:permitwaiters` hashes and of the `…:readers` and
/// `…:permits` sorted sets), summed per copy; the most any copy keeps
/// (Redlock: each master has its own copy of a lock).
pub struct RedisRecords {
    /// The servers whose script counts are read.
    counted: Vec<MultiplexedConnection>,
    /// How many of them must show a script run since the mark.
    ran_on: usize,
    /// Where the name's keys are read.
    copies: Vec<KeysOn>,
    /// Names keys as the lockers do.
    locker: Locker,
}

impl std::fmt::Debug for RedisRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisRecords")
            .field("servers", &self.counted.len())
            .field("ran_on", &self.ran_on)
            .field("copies", &self.copies.len())
            .finish()
    }
}

/// A raw connection to the server at `addr`.
async fn connect(addr: SocketAddr) -> redis::RedisResult<MultiplexedConnection> {
    redis::Client::open(format!("redis://{addr}"))?
        .get_multiplexed_async_connection()
        .await
}

impl RedisRecords {
    /// One server (a single instance, or the master a Sentinel group
    /// serves): the late request runs there. `locker` names keys.
    pub async fn server(addr: SocketAddr, locker: &Locker) -> redis::RedisResult<Self> {
        let connection = connect(addr).await?;
        Ok(Self {
            counted: vec![connection.clone()],
            ran_on: 1,
            copies: vec![KeysOn::Server(connection)],
            locker: locker.clone(),
        })
    }

    /// A cluster of the masters at `masters`: the late request runs on
    /// the one that owns the key's slot; keys are read through a cluster
    /// connection.
    pub async fn cluster(masters: &[SocketAddr], locker: &Locker) -> redis::RedisResult<Self> {
        let mut counted = Vec::new();
        for addr in masters {
            counted.push(connect(*addr).await?);
        }
        let nodes = masters.iter().map(|addr| format!("redis://{addr}"));
        let cluster = redis::cluster::ClusterClient::new(nodes.collect::<Vec<_>>())?
            .get_async_connection()
            .await?;
        Ok(Self {
            counted,
            ran_on: 1,
            copies: vec![KeysOn::Cluster(cluster)],
            locker: locker.clone(),
        })
    }

    /// Redlock's independent masters at `masters`: a round runs a script
    /// on every one of them (the frozen ones late), and each keeps its
    /// own copy of a lock.
    pub async fn redlock(masters: &[SocketAddr], locker: &Locker) -> redis::RedisResult<Self> {
        let mut counted = Vec::new();
        for addr in masters {
            counted.push(connect(*addr).await?);
        }
        Ok(Self {
            ran_on: counted.len(),
            copies: counted.iter().cloned().map(KeysOn::Server).collect(),
            counted,
            locker: locker.clone(),
        })
    }
}

/// The script calls a server has run, from `INFO commandstats`.
async fn scripts_run(connection: &MultiplexedConnection) -> Result<u64, String> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut connection.clone())
        .await
        .map_err(|e| format!("INFO commandstats: {e}"))?;
    Ok(info
        .lines()
        .filter(|line| SCRIPT_COMMANDS.iter().any(|c| line.starts_with(c)))
        .filter_map(|line| {
            let calls = line.split_once("calls=")?.1;
            calls.split(',').next()?.parse::<u64>().ok()
        })
        .sum())
}

/// The records of `keys` on one copy.
async fn records<C: ConnectionLike + Send>(
    connection: &mut C,
    keys: &RedisKeys,
) -> redis::RedisResult<usize> {
    let lock = &keys.lock;
    let count = |command: &str, key: String| {
        let mut cmd = redis::cmd(command);
        cmd.arg(key);
        cmd
    };
    let mut total: usize = count("EXISTS", lock.clone())
        .query_async(connection)
        .await?;
    for (command, suffix) in [
        ("HLEN", "waiters"),
        ("ZCARD", "readers"),
        ("ZCARD", "permits"),
        ("HLEN", "permitwaiters"),
    ] {
        let n: usize = count(command, format!("{lock}:{suffix}"))
            .query_async(connection)
            .await?;
        total += n;
    }
    Ok(total)
}

impl LostReplyStore for RedisRecords {
    /// Script calls per counted server.
    type Mark = Vec<u64>;

    async fn mark(&self) -> Vec<u64> {
        let mut counts = Vec::new();
        for connection in &self.counted {
            counts.push(scripts_run(connection).await.unwrap());
        }
        counts
    }

    /// At least `ran_on` servers ran a script since `before`.
    async fn reached(&self, before: &Vec<u64>) -> Result<(), String> {
        let mut now = Vec::new();
        for connection in &self.counted {
            now.push(scripts_run(connection).await?);
        }
        let ran = now.iter().zip(before).filter(|(n, b)| n > b).count();
        match ran >= self.ran_on {
            true => Ok(()),
            false => Err(format!("script calls {now:?}, {before:?} before")),
        }
    }

    async fn kept(&self, key: &str) -> usize {
        let keys = RedisKeys::of(&self.locker.name(key).unwrap());
        let mut most = 0;
        for copy in &self.copies {
            let kept = match copy.clone() {
                KeysOn::Server(mut connection) => records(&mut connection, &keys).await,
                KeysOn::Cluster(mut connection) => records(&mut connection, &keys).await,
            };
            most = most.max(kept.unwrap());
        }
        most
    }
}
