//! Hand-offs between distlock and the clients it joins: how long a lock or
//! a leadership takes to move from a holder of one client family to a
//! waiter of another (etcd's `etcdctl`, Apache Curator), beside the same
//! move within each family, measured in one run on one server.
//!
//! Each sample: the first contender takes the lock (or leads), the second
//! asks, is seen queued in the store (its entry or node exists) and waits
//! [`SETTLE`] more, then the first gives it back (release, resign); the sample is the time from
//! the give-back being started to the second learning that it holds, on
//! this process's monotonic clock. A peer process learns it holds when its
//! answer line arrives here, so a peer's figures include one pipe write
//! and read (microseconds) besides the peer's own work.
//!
//! The `distlock-peer-bench` binary drives it.

pub mod curator;
pub mod etcd;

use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use distlock::{Election, Leadership, LockGuard, Locker};
use tokio::task::JoinHandle;

/// How long any step (a take, a hand-off, being seen queued) may take
/// before the row fails: far beyond any working store.
const PATIENCE: Duration = Duration::from_secs(20);

/// How long the second contender waits, queued, before the give-back.
pub const SETTLE: Duration = Duration::from_millis(200);

/// Samples taken, unreported, before a row's first measured one (a JVM's
/// first calls run interpreted).
pub const WARM_UP: usize = 5;

/// One side of a hand-off: a distlock locker or a peer process, on one
/// lock or election.
#[async_trait]
pub trait Contender: Send {
    /// Starts asking for the lock or leadership without waiting for it.
    async fn ask(&mut self) -> Result<(), String>;
    /// Waits until the request of [`ask`](Self::ask) holds; the instant
    /// this side learned it.
    async fn held(&mut self) -> Result<Instant, String>;
    /// Gives the hold back (release, resign) and returns once done.
    async fn give_back(&mut self) -> Result<(), String>;
}

/// Counts the contenders of the row's lock or election in the store.
pub type Census = Box<dyn FnMut() -> Pin<Box<dyn Future<Output = Result<usize, String>> + Send>>>;

/// One row: who hands over to whom, and the samples.
#[derive(Debug, Clone)]
pub struct Row {
    /// The store and primitive, e.g. `etcd, lock`.
    pub what: String,
    /// Who holds first.
    pub from: String,
    /// Who waits and takes over.
    pub to: String,
    /// Each hand-off's duration.
    pub samples: Vec<Duration>,
}

/// Which client a contender is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// A distlock locker (each contender its own).
    Distlock,
    /// A process of the peer family.
    Peer,
}

/// The hand-offs measured for each primitive: across the families both
/// ways, then within each.
pub const DIRECTIONS: [(Side, Side); 4] = [
    (Side::Peer, Side::Distlock),
    (Side::Distlock, Side::Peer),
    (Side::Distlock, Side::Distlock),
    (Side::Peer, Side::Peer),
];

/// A peer client family on a server of its store, with distlock beside it
/// in the layout that joins it.
#[async_trait]
pub trait Family: Send + Sync {
    /// The store, e.g. `etcd`.
    fn store(&self) -> &'static str;
    /// The peer family, e.g. `etcdctl`.
    fn peer(&self) -> &'static str;
    /// The URL distlock's lockers open: the server, in the joining layout.
    fn distlock_url(&self) -> String;
    /// A fresh peer contender for `key`'s `primitive`.
    async fn peer_contender(
        &self,
        key: &str,
        primitive: Primitive,
    ) -> Result<Box<dyn Contender>, String>;
    /// Counts the contenders queued on `key` in the store.
    fn census(&self, key: &str) -> Census;
}

/// A [`Census`] that runs `count` on a fresh copy of `state` each time.
pub fn census<S, F>(state: S, count: fn(S) -> F) -> Census
where
    S: Clone + Send + 'static,
    F: Future<Output = Result<usize, String>> + Send + 'static,
{
    Box::new(move || Box::pin(count(state.clone())))
}

/// A fresh contender of `side` for `key`'s `primitive`: a distlock locker
/// of its own, or a peer.
async fn contender(
    family: &dyn Family,
    side: Side,
    key: &str,
    primitive: Primitive,
) -> Result<Box<dyn Contender>, String> {
    match side {
        Side::Peer => family.peer_contender(key, primitive).await,
        Side::Distlock => {
            let locker = distlock::connect(&family.distlock_url()).await;
            let locker = locker.map_err(|e| e.to_string())?;
            Ok(Box::new(Distlock::new(locker, key, primitive)))
        }
    }
}

/// Every row of `family`: lock hand-offs and failovers after resign in
/// each of [`DIRECTIONS`], `samples` each.
pub async fn rows(family: &dyn Family, samples: usize) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for primitive in [Primitive::Lock, Primitive::Leader] {
        for (i, (from, to)) in DIRECTIONS.into_iter().enumerate() {
            let key = format!("peer-bench/{}-{i}", primitive.word());
            let mut first = contender(family, from, &key, primitive).await?;
            let mut second = contender(family, to, &key, primitive).await?;
            let mut census = family.census(&key);
            let samples = measure(&mut *first, &mut *second, &mut census, samples)
                .await
                .map_err(|e| format!("{} {key}: {e}", family.store()))?;
            let name = |side| match side {
                Side::Distlock => "distlock".to_owned(),
                Side::Peer => family.peer().to_owned(),
            };
            rows.push(Row {
                what: format!("{}, {}", family.store(), primitive.word()),
                from: name(from),
                to: name(to),
                samples,
            });
        }
    }
    Ok(rows)
}

impl Row {
    /// The `q`-quantile of the samples (nearest rank), `None` when there
    /// are none.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let mut sorted = self.samples.clone();
        sorted.sort();
        let last = sorted.len().checked_sub(1)?;
        let rank = ((last as f64) * q).round() as usize;
        sorted.get(rank.min(last)).copied()
    }
}

/// Measures `samples` hand-offs (after [`WARM_UP`] unreported ones) from
/// `first` to `second`, each seen queued by `census` before the
/// give-back.
pub async fn measure(
    first: &mut dyn Contender,
    second: &mut dyn Contender,
    census: &mut Census,
    samples: usize,
) -> Result<Vec<Duration>, String> {
    let mut measured = Vec::with_capacity(samples);
    for i in 0..WARM_UP + samples {
        let took = within("a hand-off", one_hand_off(first, second, census)).await?;
        if i >= WARM_UP {
            measured.push(took);
        }
    }
    Ok(measured)
}

async fn one_hand_off(
    first: &mut dyn Contender,
    second: &mut dyn Contender,
    census: &mut Census,
) -> Result<Duration, String> {
    first.ask().await?;
    first.held().await?;
    second.ask().await?;
    // Read until the second's entry shows: a benchmark's own wait, not
    // part of any sample.
    while census().await? < 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Queued is not yet waiting: a peer may still be setting up its
    // watch (etcd delivers to a watch that starts at the current
    // revision, as Go's waiters start theirs, only from its next sync of
    // such watches, every 100 ms). Waiters in use have waited longer.
    tokio::time::sleep(SETTLE).await;
    let started = Instant::now();
    let (gave, took) = tokio::join!(first.give_back(), second.held());
    gave?;
    let took = took?.saturating_duration_since(started);
    second.give_back().await?;
    Ok(took)
}

async fn within<T>(what: &str, step: impl Future<Output = Result<T, String>>) -> Result<T, String> {
    tokio::time::timeout(PATIENCE, step)
        .await
        .map_err(|_| format!("{what} took longer than {PATIENCE:?}"))?
}

/// The rows as a Markdown table: p50 and p99 per row.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from("| store, primitive | from | to | samples | p50 | p99 |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for row in rows {
        let show = |q| row.quantile(q).map_or("-".into(), |d| format!("{d:.2?}"));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            row.what,
            row.from,
            row.to,
            row.samples.len(),
            show(0.5),
            show(0.99)
        );
    }
    out
}

/// What a contender takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Primitive {
    /// A lock: hand-off on release.
    Lock,
    /// Leadership of an election: failover after resign.
    Leader,
}

impl Primitive {
    /// `lock` or `election`.
    pub fn word(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Leader => "election",
        }
    }
}

/// What a distlock contender holds.
#[derive(Debug)]
enum Hold {
    Lock(LockGuard),
    Leader(Leadership),
}

/// A distlock locker on one name, taking its lock or its leadership.
#[derive(Debug)]
pub struct Distlock {
    locker: Locker,
    key: String,
    primitive: Primitive,
    pending: Option<JoinHandle<Result<(Instant, Hold), String>>>,
    hold: Option<Hold>,
}

impl Distlock {
    /// A contender for `key`'s lock or leadership through `locker`.
    pub fn new(locker: Locker, key: &str, primitive: Primitive) -> Self {
        Self {
            locker,
            key: key.to_owned(),
            primitive,
            pending: None,
            hold: None,
        }
    }
}

#[async_trait]
impl Contender for Distlock {
    async fn ask(&mut self) -> Result<(), String> {
        let (locker, key) = (self.locker.clone(), self.key.clone());
        let primitive = self.primitive;
        self.pending = Some(tokio::spawn(async move {
            let hold = match primitive {
                Primitive::Lock => Hold::Lock(locker.lock(&key).await.map_err(|e| e.to_string())?),
                Primitive::Leader => {
                    let election: Election = locker.election(&key).map_err(|e| e.to_string())?;
                    let leadership = election.campaign("distlock").await;
                    Hold::Leader(leadership.map_err(|e| e.to_string())?)
                }
            };
            Ok((Instant::now(), hold))
        }));
        Ok(())
    }

    async fn held(&mut self) -> Result<Instant, String> {
        let pending = self.pending.take().ok_or("held() without ask()")?;
        let (at, hold) = pending.await.map_err(|e| e.to_string())??;
        self.hold = Some(hold);
        Ok(at)
    }

    async fn give_back(&mut self) -> Result<(), String> {
        let given = match self.hold.take().ok_or("give_back() without a hold")? {
            Hold::Lock(guard) => guard.release().await,
            Hold::Leader(leadership) => leadership.resign().await,
        };
        given.map_err(|e| e.to_string())
    }
}
