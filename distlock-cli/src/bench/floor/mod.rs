//! The raw floors `distlock bench` measures distlock against: the store
//! operations of one uncontended lock+release, made with the same client
//! library as the store crate and none of distlock's machinery, on a
//! connection of the floor's own.
//!
//! Each floor reads the URL through `lock_core::open::parse` into its
//! store's public config and opens its client with that config's own
//! connect method (`RedisConfig::connection_manager` and
//! `cluster_connection`, `EtcdConfig::connect`, `ZkConfig::connect`), so
//! it reaches the servers the store does, with the same credentials, TLS
//! files and timeouts. (PostgreSQL's config has no public connect method:
//! its floor builds the client's settings from the config's fields and
//! connects without TLS, see [`postgres`].) Like a raw spin lock, a
//! call that did not take its lock fails: on a contended name the floor's
//! rate counts acquisitions, not refused attempts. Floors write where no
//! real lock lives, so a floor never touches a lock of distlock's.
//!
//! | store     | floor                                                   |
//! |-----------|---------------------------------------------------------|
//! | file      | open + `flock(LOCK_EX\|LOCK_NB)` + unlock + close       |
//! | Redis     | `SET NX PX` + `DEL` (Redlock: on every master at once)  |
//! | etcd      | txn(create_revision == 0 → put) + delete                |
//! | ZooKeeper | create EPHEMERAL_SEQUENTIAL + delete                    |
//! | PostgreSQL | `INSERT … RETURNING id` + `DELETE`, 2 autocommit statements on a table |
//! | memory    | none                                                    |
//!
//! Each floor also has a single raw round trip, the floor of the election
//! benchmark's observe latency (a change reaches a watcher in no less):
//!
//! | store     | one raw round trip                                      |
//! |-----------|---------------------------------------------------------|
//! | file      | `stat` of the floor's lock file                         |
//! | Redis     | `GET` (Redlock: on every master at once)                |
//! | etcd      | range read (linearizable `get`)                         |
//! | ZooKeeper | `exists`                                                |
//! | PostgreSQL | `SELECT` of one row                                    |
//!
//! A store may also have another raw recipe of a lock, measured beside the
//! floor for comparison but not the floor, because it lacks what the
//! store's locks guarantee ([`FloorProbe::describe_beside`]):
//!
//! | store     | beside the floor                                        |
//! |-----------|---------------------------------------------------------|
//! | PostgreSQL | `pg_advisory_lock` + `pg_advisory_unlock` on one connection (lives in the connection, never written) |
//!
//! The file store also has a raw hand-off ([`FloorProbe::handoff_once`]),
//! the floor of the election benchmark's failover: its lock+release floor
//! is two local system calls, not a hand-off. A thread blocks in
//! `flock(LOCK_EX)` on the floor's file while another holds it; from the
//! holder's unlock to the blocked `flock` returning.
//!
//! A store whose watches carry no data also has a raw recipe of the whole
//! observe step ([`FloorProbe::open_notify`]):
//!
//! | store     | raw notify recipe                                       |
//! |-----------|---------------------------------------------------------|
//! | ZooKeeper | n sessions in `get_and_watch_data`, re-read on the watch |

#[cfg(feature = "etcd")]
mod etcd;
mod file;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "zookeeper")]
mod zookeeper;

use std::fmt::{self, Write as _};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use distlock::{LockError, LockName};
use lock_core::backend::Store;

/// The raw store operations of one lock+release, for benchmark floors.
#[async_trait::async_trait]
pub(crate) trait FloorProbe: Send + Sync + fmt::Debug {
    /// What the probe does, e.g. `SET NX PX + DEL`.
    fn describe(&self) -> String;

    /// Runs the raw round trips of one uncontended lock+release on `name`.
    /// Fails where the raw lock is held by someone else.
    async fn lock_release_once(&self, name: &LockName) -> Result<(), LockError>;

    /// Removes what the probe left in the store for `namespace` (the
    /// default: nothing is left, every raw lock is deleted or expires).
    async fn clean_up(&self, _namespace: &str) -> Result<(), LockError> {
        Ok(())
    }

    /// What one raw round trip of [`round_trip_once`](Self::round_trip_once)
    /// is, e.g. `GET`.
    fn describe_round_trip(&self) -> String;

    /// One raw round trip to the store about `name`, a read of the floor's
    /// own key that changes nothing.
    async fn round_trip_once(&self, name: &LockName) -> Result<(), LockError>;

    /// What [`handoff_once`](Self::handoff_once) does; `None` for a store
    /// without a raw hand-off recipe (there, the lock+release floor's two
    /// round trips are the least a hand-off costs).
    fn describe_handoff(&self) -> Option<String> {
        None
    }

    /// One raw hand-off beside `name`: a holder releases while a raw
    /// waiter is blocked on the same lock; the time from the release call
    /// to the waiter holding. `None` without a recipe.
    async fn handoff_once(&self, _name: &LockName) -> Result<Option<Duration>, LockError> {
        Ok(None)
    }

    /// What [`beside_once`](Self::beside_once) does: another raw recipe
    /// of one lock+release, measured beside the floor for comparison, not
    /// the floor (it lacks what the store's locks guarantee); `None` for
    /// a store without one.
    fn describe_beside(&self) -> Option<String> {
        None
    }

    /// One uncontended lock+release of that recipe on `name` (nothing
    /// without one).
    async fn beside_once(&self, _name: &LockName) -> Result<(), LockError> {
        Ok(())
    }

    /// The raw recipe of the observe step beside `name`: `observers`
    /// watchers of their own, each on a connection of its own; `None` for
    /// a store whose raw round trip is its floor already.
    async fn open_notify(
        &self,
        _name: &LockName,
        _observers: usize,
    ) -> Result<Option<Box<dyn NotifyProbe>>, LockError> {
        Ok(None)
    }
}

/// Raw watchers of one key, and the raw change they wait for.
#[async_trait::async_trait]
pub(crate) trait NotifyProbe: Send + fmt::Debug {
    /// What the recipe does.
    fn describe(&self) -> String;

    /// Makes one raw change; once every watcher has it, returns per
    /// watcher the time from the change returning to (a) its watch firing
    /// and (b) its having the new data (and watching again).
    async fn notify_once(&mut self) -> Result<Vec<(Duration, Duration)>, LockError>;
}

/// A floor, boxed.
type Floor = Box<dyn FloorProbe>;

type Opening<'a> = Pin<Box<dyn Future<Output = Result<Floor, LockError>> + Send + 'a>>;

/// One store's floor: the schemes of its plug-in, and how to open it.
struct FloorEntry {
    schemes: &'static [&'static str],
    open: for<'a> fn(&'a str) -> Opening<'a>,
}

/// The floor of store `S`.
fn floor_of<S: Store>(open: for<'a> fn(&'a str) -> Opening<'a>) -> FloorEntry {
    FloorEntry {
        schemes: S::SCHEMES,
        open,
    }
}

/// Every floor of this build: one line per store, behind its feature.
fn floors() -> Vec<FloorEntry> {
    vec![
        floor_of::<lock_file::FileStore>(|url| Box::pin(async move { file::open(url) })),
        #[cfg(feature = "redis")]
        floor_of::<lock_redis::RedisStore>(|url| Box::pin(redis::open(url))),
        #[cfg(feature = "etcd")]
        floor_of::<lock_etcd::EtcdStore>(|url| Box::pin(etcd::open(url))),
        #[cfg(feature = "zookeeper")]
        floor_of::<lock_zookeeper::ZkStore>(|url| Box::pin(zookeeper::open(url))),
        #[cfg(feature = "postgres")]
        floor_of::<distlock::postgres::PgStore>(|url| Box::pin(postgres::open(url))),
    ]
}

/// The floor of the store `url` names, on a connection of its own; `None`
/// for a store without one (memory), or one not compiled in.
pub(crate) async fn open(url: &str) -> Result<Option<Floor>, LockError> {
    let scheme = lock_core::url::scheme_of(url)?;
    match floors()
        .iter()
        .find(|floor| floor.schemes.contains(&scheme))
    {
        Some(floor) => (floor.open)(url).await.map(Some),
        None => Ok(None),
    }
}

/// The value or node data a floor writes.
#[cfg(any(feature = "redis", feature = "etcd", feature = "zookeeper"))]
const PAYLOAD: &str = "floor";

/// `text` with every byte outside `[A-Za-z0-9_-]` written `%XX`: one path
/// segment or key part, never `.` or `..`, and distinct for distinct texts.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-') {
            escaped.push(char::from(byte));
        } else {
            let _ = write!(escaped, "%{byte:02X}");
        }
    }
    escaped
}

/// The error of a call that found its raw lock taken: a zero wait that
/// ran out, as for a `try_lock`, so that the throughput test counts it as
/// a busy attempt rather than a failure.
fn taken(what: impl fmt::Display) -> LockError {
    LockError::Timeout {
        key: format!("floor probe: {what}"),
        waited: Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_has_no_floor() {
        assert!(open("mem://").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_url_that_is_no_url_fails() {
        assert!(open("no scheme").await.is_err());
    }

    #[test]
    fn escaped_names_are_one_plain_segment() {
        assert_eq!(escape("a/b.c"), "a%2Fb%2Ec");
        assert_eq!(escape(".."), "%2E%2E");
        assert_eq!(escape("Key_1-x"), "Key_1-x");
        assert_ne!(escape("a%2Fb"), escape("a/b"));
        assert_eq!(escape("ü"), "%C3%BC");
    }
}
