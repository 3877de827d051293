//! The measurements: uncontended latency against the floor, handoff, and
//! throughput.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{LockError, LockName, LockOptions, Locker};
use tokio::task::JoinHandle;

use super::floor::FloorProbe;
use super::opener::Opener;
use super::stats::Handovers;
use crate::exit::Failure;

/// Samples per block when ours and the floor alternate; small enough that
/// a burst of machine noise lands in blocks of both.
const BLOCK: usize = 50;
/// Most samples of the uncontended test (per side).
const LATENCY_SAMPLES: usize = 2_000;
/// Unrecorded operations before the uncontended test (files, connections
/// and caches get created on first use).
const WARM_UP: usize = 10;
/// Most handoffs measured.
const HANDOFFS: usize = 200;
/// Fewest handoffs measured, however long they take.
const MIN_HANDOFFS: usize = 10;
/// How long the waiter is given to block in `lock()` before the holder
/// releases.
pub(crate) const WAITER_SETTLE: Duration = Duration::from_millis(5);

/// Uncontended lock+release latencies, ours and (if there is a probe) the
/// floor's and the recipe beside it (if the probe has one), interleaved
/// in blocks within `budget`.
#[derive(Debug, Default)]
pub(crate) struct Uncontended {
    pub(crate) ours: Vec<Duration>,
    pub(crate) floor: Vec<Duration>,
    pub(crate) beside: Vec<Duration>,
}

pub(crate) async fn uncontended(
    locker: &Locker,
    probe: Option<&dyn FloorProbe>,
    budget: Duration,
) -> Result<Uncontended, LockError> {
    // Distinct keys of the same shape, so a probe that stores something
    // different from distlock's own record cannot confuse either side.
    let ours_key = "bench/latency-ours";
    let floor_name = locker.name("bench/latency-raw")?;
    let beside = probe.filter(|probe| probe.describe_beside().is_some());
    for _ in 0..WARM_UP {
        lock_release(locker, ours_key).await?;
        if let Some(probe) = probe {
            probe.lock_release_once(&floor_name).await?;
        }
        if let Some(probe) = beside {
            probe.beside_once(&floor_name).await?;
        }
    }
    let mut samples = Uncontended::default();
    let started = Instant::now();
    while samples.ours.len() < LATENCY_SAMPLES
        && (samples.ours.is_empty() || started.elapsed() < budget)
    {
        for _ in 0..BLOCK {
            samples.ours.push(lock_release(locker, ours_key).await?);
        }
        if let Some(probe) = probe {
            for _ in 0..BLOCK {
                samples.floor.push(timed_floor(probe, &floor_name).await?);
            }
        }
        if let Some(probe) = beside {
            for _ in 0..BLOCK {
                let started = Instant::now();
                probe.beside_once(&floor_name).await?;
                samples.beside.push(started.elapsed());
            }
        }
    }
    Ok(samples)
}

async fn lock_release(locker: &Locker, key: &str) -> Result<Duration, LockError> {
    let started = Instant::now();
    let guard = locker
        .lock_with(key, LockOptions::new().wait_forever())
        .await?;
    guard.release().await?;
    Ok(started.elapsed())
}

async fn timed_floor(probe: &dyn FloorProbe, name: &LockName) -> Result<Duration, LockError> {
    let started = Instant::now();
    probe.lock_release_once(name).await?;
    Ok(started.elapsed())
}

/// Handoff latencies: from the holder's `release()` (its call and its
/// return) to the blocked waiter's `lock()` returning. Two lockers, each
/// with its own connection unless the bench is `--shared`.
pub(crate) async fn handoff(opener: &Opener, budget: Duration) -> Result<Handovers, Failure> {
    let holder = opener.open().await?;
    let waiter = opener.open().await?;
    let key = "bench/handoff";
    // A handoff that never happens is a backend bug; do not hang on it.
    let patience = LockOptions::new().wait(budget.max(Duration::from_secs(10)));
    let mut samples = Handovers::default();
    let started = Instant::now();
    while samples.len() < HANDOFFS && (samples.len() < MIN_HANDOFFS || started.elapsed() < budget) {
        let held = holder.lock_with(key, patience.clone()).await?;
        let waiting = {
            let (waiter, patience) = (waiter.clone(), patience.clone());
            tokio::spawn(async move {
                let taken = waiter.lock_with(key, patience).await;
                (Instant::now(), taken)
            })
        };
        tokio::time::sleep(WAITER_SETTLE).await;
        let releasing = Instant::now();
        held.release().await?;
        let released = Instant::now();
        let (taken_at, taken) = waiting
            .await
            .map_err(|e| Failure::other(format!("handoff waiter failed: {e}")))?;
        samples.record(releasing, released, taken_at);
        taken?.release().await?;
    }
    Ok(samples)
}

/// Lock+release operations per client over one period.
#[derive(Debug)]
pub(crate) struct Counts {
    pub(crate) per_client: Vec<u64>,
    pub(crate) elapsed: Duration,
    /// Floor attempts that found their raw lock held by another client
    /// (the raw recipe does not wait; the client tries again).
    pub(crate) busy: u64,
    /// Floor operations that failed otherwise, and the first such error.
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
}

impl Counts {
    /// Adds the counts of a later period with the same clients.
    fn add(&mut self, later: Counts) {
        for (sum, done) in self.per_client.iter_mut().zip(later.per_client) {
            *sum += done;
        }
        self.elapsed += later.elapsed;
        self.busy += later.busy;
        self.errors += later.errors;
        self.first_error = self.first_error.take().or(later.first_error);
    }
}

/// How many slices the throughput tests are cut into.
const THROUGHPUT_SLICES: u32 = 4;

/// The throughput of ours and (if the store has a probe) the floor's,
/// measured in alternating slices of `duration` each, so that a slow
/// stretch of the machine or the server hits both sides alike.
pub(crate) async fn throughputs(
    opener: &Opener,
    clients: usize,
    keys: usize,
    duration: Duration,
    with_floor: bool,
) -> Result<(Counts, Option<Counts>), Failure> {
    let slice = duration / THROUGHPUT_SLICES;
    let floor_slice = |opener| async move {
        if with_floor {
            floor_throughput(opener, clients, keys, slice).await
        } else {
            Ok(None)
        }
    };
    let mut ours = throughput(opener, clients, keys, slice).await?;
    let mut floor = floor_slice(opener).await?;
    for _ in 1..THROUGHPUT_SLICES {
        ours.add(throughput(opener, clients, keys, slice).await?);
        if let (Some(total), Some(counts)) = (floor.as_mut(), floor_slice(opener).await?) {
            total.add(counts);
        }
    }
    Ok((ours, floor))
}

/// `clients` lockers doing lock+release for `duration`, each on keys
/// picked at random from `keys` keys (see [`KeyPicker`]).
async fn throughput(
    opener: &Opener,
    clients: usize,
    keys: usize,
    duration: Duration,
) -> Result<Counts, Failure> {
    let keys = throughput_keys("ours", keys);
    let mut lockers = Vec::with_capacity(clients);
    for _ in 0..clients {
        lockers.push(opener.open().await?);
    }
    let started = Instant::now();
    let deadline = started + duration;
    let tasks = spawn_clients(lockers, |client, locker| {
        let keys = Arc::clone(&keys);
        async move {
            let mut done = 0u64;
            let mut picker = KeyPicker::new(client, keys.len());
            loop {
                let now = Instant::now();
                if now >= deadline {
                    return Ok(done);
                }
                let key = &keys[picker.next()];
                match locker
                    .lock_with(key, LockOptions::new().wait(deadline - now))
                    .await
                {
                    Ok(guard) => guard.release().await?,
                    Err(error) if error.is_timeout() => return Ok(done),
                    Err(error) => return Err(error),
                }
                done += 1;
                // Stores answered from this process (file, mem) may
                // complete without ever yielding; let the other clients run.
                tokio::task::yield_now().await;
            }
        }
    });
    let per_client = join_clients(tasks, "bench client")
        .await?
        .into_iter()
        .collect::<Result<Vec<u64>, LockError>>()?;
    Ok(Counts {
        per_client,
        elapsed: started.elapsed(),
        busy: 0,
        errors: 0,
        first_error: None,
    })
}

/// The floor's throughput: the same clients and keys, each client with its
/// own probe (own connection) unless shared. Failed probe calls are
/// counted, not fatal: a raw probe may refuse a key another client holds.
async fn floor_throughput(
    opener: &Opener,
    clients: usize,
    keys: usize,
    duration: Duration,
) -> Result<Option<Counts>, Failure> {
    let keys = throughput_keys("raw", keys);
    let mut probes: Vec<Arc<dyn FloorProbe>> = Vec::with_capacity(clients);
    for _ in 0..clients {
        match opener.probe().await? {
            Some(probe) => probes.push(probe),
            None => return Ok(None),
        }
    }
    let base = opener.open().await?;
    let names = keys
        .iter()
        .map(|key| base.name(key))
        .collect::<Result<Vec<_>, _>>()?;
    let names = Arc::new(names);
    let started = Instant::now();
    let deadline = started + duration;
    let tasks = spawn_clients(probes, |client, probe| {
        let names = Arc::clone(&names);
        async move {
            let mut counts = FloorClient::default();
            let mut picker = KeyPicker::new(client, names.len());
            while Instant::now() < deadline {
                let name = &names[picker.next()];
                counts.count(probe.lock_release_once(name).await);
                tokio::task::yield_now().await;
            }
            counts
        }
    });
    let results = join_clients(tasks, "floor client").await?;
    Ok(Some(Counts {
        per_client: results.iter().map(|c| c.done).collect(),
        elapsed: started.elapsed(),
        busy: results.iter().map(|c| c.busy).sum(),
        errors: results.iter().map(|c| c.errors).sum(),
        first_error: results.into_iter().find_map(|c| c.first_error),
    }))
}

/// What one floor client did.
#[derive(Debug, Default)]
struct FloorClient {
    done: u64,
    busy: u64,
    errors: u64,
    first_error: Option<String>,
}

impl FloorClient {
    /// Counts one raw lock+release: done, found held (the probes report a
    /// held raw lock as a zero wait that ran out), or failed.
    fn count(&mut self, result: Result<(), LockError>) {
        match result {
            Ok(()) => self.done += 1,
            Err(LockError::Timeout { .. }) => self.busy += 1,
            Err(error) => {
                self.errors += 1;
                self.first_error
                    .get_or_insert_with(|| crate::exit::describe(&error));
            }
        }
    }
}

/// Spawns `client(index, item)` for each of `items`: one task per bench
/// client, each knowing its index.
fn spawn_clients<T, F>(items: Vec<T>, client: impl Fn(usize, T) -> F) -> Vec<JoinHandle<F::Output>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| tokio::spawn(client(index, item)))
        .collect()
}

/// Awaits the client tasks in order; a task that panicked fails the bench,
/// naming `what` it was.
async fn join_clients<T>(tasks: Vec<JoinHandle<T>>, what: &str) -> Result<Vec<T>, Failure> {
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        let result = task
            .await
            .map_err(|e| Failure::other(format!("{what} failed: {e}")))?;
        results.push(result);
    }
    Ok(results)
}

/// Picks a throughput client's keys: uniformly at random, each client from
/// a sequence fixed by its index, so that ours and the floor run the same
/// picks. Random picks spread the clients the way "K keys" means: any two
/// clients meet on a key about once in K operations. (Picking round-robin
/// from the client's index, as before, sent all clients through the same
/// few keys in lockstep: a sliding window of about N keys, each fresh.)
struct KeyPicker {
    rng: fastrand::Rng,
    keys: usize,
}

impl KeyPicker {
    fn new(client: usize, keys: usize) -> Self {
        Self {
            rng: fastrand::Rng::with_seed(client as u64),
            keys,
        }
    }

    /// The index of the next operation's key.
    fn next(&mut self) -> usize {
        self.rng.usize(..self.keys)
    }
}

/// `keys` key names for one side (`ours` or `raw`); the sides use keys of
/// the same shape but never the same key.
fn throughput_keys(side: &str, keys: usize) -> Arc<Vec<String>> {
    Arc::new(
        (0..keys)
            .map(|k| format!("bench/throughput-{side}-{k}"))
            .collect(),
    )
}
