//! `bench --hold N`: what holding many locks costs the client process:
//! renewal traffic and memory per held lock.
//!
//! One locker takes N distinct locks, then, after a pause of one second
//! (see [`SETTLE`]), holds them for a window while the process does
//! nothing else. Across the window it counts the write
//! system calls and bytes the process made (`syscw` and `wchar` of
//! `/proc/self/io`): renewals, lease keepalives, session heartbeats, and
//! the runtime's own wake-ups. Resident memory (`/proc/self/statm`) is
//! sampled before the locks are taken and at the end of the window, while
//! all are still held; the difference over N is the memory per held lock.
//!
//! The counters cover the whole process, which is why `--hold` runs alone:
//! connections left over from a throughput test would be counted too. The
//! kernel counts `write(2)`, `writev(2)`, `pwrite(2)` and friends, not
//! `send(2)` or `sendmsg(2)`; the Redis, etcd and ZooKeeper clients write
//! to their sockets with the former (checked with `strace`), so their
//! traffic shows.

use futures_util::StreamExt;
use std::time::{Duration, Instant};

use distlock::{LockGuard, LockOptions, Locker};
use serde::Serialize;

use crate::exit::Failure;

/// How long taking one of the N (free, fresh) locks may take before the
/// run is abandoned: only a store in trouble gets near it.
const ACQUIRE_PATIENCE: Duration = Duration::from_secs(30);
/// The key of the warm-up lock, taken and released before the memory
/// baseline so that first-use allocations (connections, scripts, caches)
/// are not counted as the cost of holding.
const WARM_UP_KEY: &str = "bench/hold-warm-up";

/// What holding the locks cost.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HoldCost {
    /// Locks held.
    pub(crate) locks: usize,
    /// How long taking all of them took ([`TAKE_AT_ONCE`] at a time).
    pub(crate) acquire: Duration,
    /// The measured window, as it actually lasted.
    pub(crate) window: Duration,
    /// Write counters over the window; `None` where `/proc/self/io` is
    /// not available (not Linux).
    pub(crate) writes: Option<IoCounters>,
    /// Resident memory before taking the locks, in bytes.
    pub(crate) rss_before: Option<u64>,
    /// Resident memory at the end of the window, all locks held, in bytes.
    pub(crate) rss_after: Option<u64>,
    /// Locks no longer held at the end of the window (renewal could not
    /// keep up, or the store took them away).
    pub(crate) lost: usize,
}

/// Write counters of this process (`/proc/self/io`), or their change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IoCounters {
    /// `syscw`: write system calls.
    pub(crate) syscalls: u64,
    /// `wchar`: bytes passed to them.
    pub(crate) bytes: u64,
}

impl IoCounters {
    /// The counters of this process now; `None` off Linux or if
    /// `/proc/self/io` cannot be read.
    pub(crate) fn sample() -> Option<Self> {
        if !cfg!(target_os = "linux") {
            return None;
        }
        Self::parse(&std::fs::read_to_string("/proc/self/io").ok()?)
    }

    /// Parses the text of `/proc/<pid>/io`.
    fn parse(text: &str) -> Option<Self> {
        let field = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|value| value.trim().parse::<u64>().ok())
        };
        Some(Self {
            syscalls: field("syscw")?,
            bytes: field("wchar")?,
        })
    }

    /// The change from `earlier` to `self`.
    fn since(self, earlier: Self) -> Self {
        Self {
            syscalls: self.syscalls.saturating_sub(earlier.syscalls),
            bytes: self.bytes.saturating_sub(earlier.bytes),
        }
    }
}

/// Resident memory of this process in bytes (`/proc/self/statm`); `None`
/// off Linux.
pub(crate) fn resident_bytes() -> Option<u64> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    resident_pages(&statm)?.checked_mul(u64::try_from(page).ok()?)
}

/// The second field of `/proc/<pid>/statm`: resident pages.
fn resident_pages(statm: &str) -> Option<u64> {
    statm.split_whitespace().nth(1)?.parse().ok()
}

/// How many of the locks are being taken at any moment.
const TAKE_AT_ONCE: usize = 64;
/// How long after the last lock is taken the window opens. Work that
/// follows each acquisition once belongs to taking the lock, not to
/// holding it: the etcd and ZooKeeper backends set a watch on a lock's own
/// entry 100 ms after taking it, and without this pause the watches of
/// the last ~100 ms of acquisitions were counted as holding traffic.
const SETTLE: Duration = Duration::from_secs(1);

/// Takes `locks` distinct locks on `locker`, holds them for `window`
/// measuring what that costs, then releases them all.
pub(crate) async fn hold(
    locker: &Locker,
    locks: usize,
    window: Duration,
) -> Result<HoldCost, Failure> {
    let patience = LockOptions::new().wait(ACQUIRE_PATIENCE);
    locker
        .lock_with(WARM_UP_KEY, patience.clone())
        .await?
        .release()
        .await?;

    let rss_before = resident_bytes();
    let started = Instant::now();
    // Taken TAKE_AT_ONCE at a time, so 10,000 locks on a store with
    // millisecond writes take seconds, not minutes; the window measured
    // below starts only once all are held.
    let taken = futures_util::stream::iter(0..locks)
        .map(|i| {
            let (locker, patience) = (locker.clone(), patience.clone());
            async move { locker.lock_with(&format!("bench/hold-{i}"), patience).await }
        })
        .buffer_unordered(TAKE_AT_ONCE)
        .collect::<Vec<_>>()
        .await;
    let mut guards = Vec::with_capacity(locks);
    let mut failure = None;
    for guard in taken {
        match guard {
            Ok(guard) => guards.push(guard),
            Err(error) => failure = Some(error),
        }
    }
    if let Some(error) = failure {
        release_all(guards).await;
        return Err(error.into());
    }
    let acquire = started.elapsed();
    tokio::time::sleep(SETTLE).await;

    let io_start = IoCounters::sample();
    let window_start = Instant::now();
    tokio::time::sleep(window).await;
    let io_end = IoCounters::sample();
    let window = window_start.elapsed();
    let rss_after = resident_bytes();
    let lost = guards.iter().filter(|guard| !guard.is_held()).count();

    release_all(guards).await;
    Ok(HoldCost {
        locks,
        acquire,
        window,
        writes: io_start.zip(io_end).map(|(start, end)| end.since(start)),
        rss_before,
        rss_after,
        lost,
    })
}

/// Releases every guard, all at once. A lock lost during the window gives
/// `Err(Lost)` here; that is already counted in [`HoldCost::lost`], and a
/// failed release of the rest is left to the ttl, as after a crash.
async fn release_all(guards: Vec<LockGuard>) {
    let releases: Vec<_> = guards
        .into_iter()
        .map(|guard| tokio::spawn(guard.release()))
        .collect();
    for release in releases {
        let _ = release.await;
    }
}

/// The `hold` section of the `--json` output.
#[derive(Debug, Serialize)]
pub(crate) struct HoldJson {
    locks: usize,
    acquire_ms: f64,
    window_ms: f64,
    /// `null` where `/proc/self/io` is not available.
    write_syscalls: Option<u64>,
    write_syscalls_per_sec: Option<f64>,
    bytes_written: Option<u64>,
    bytes_written_per_sec: Option<f64>,
    rss_before_bytes: Option<u64>,
    rss_after_bytes: Option<u64>,
    /// `(rss_after - rss_before) / locks`; may be negative if the
    /// allocator returned memory meanwhile.
    rss_per_lock_bytes: Option<f64>,
    lost: usize,
}

impl HoldCost {
    /// Write system calls per second of the window.
    pub(crate) fn syscalls_per_sec(&self) -> Option<f64> {
        self.writes.map(|w| per_sec(w.syscalls, self.window))
    }

    /// Bytes written per second of the window.
    pub(crate) fn bytes_per_sec(&self) -> Option<f64> {
        self.writes.map(|w| per_sec(w.bytes, self.window))
    }

    /// Resident memory added per held lock, in bytes.
    pub(crate) fn rss_per_lock(&self) -> Option<f64> {
        let (before, after) = (self.rss_before?, self.rss_after?);
        if self.locks == 0 {
            return None;
        }
        Some((after as f64 - before as f64) / self.locks as f64)
    }

    /// The `hold` object of `--json`.
    pub(crate) fn json(&self) -> HoldJson {
        HoldJson {
            locks: self.locks,
            acquire_ms: self.acquire.as_secs_f64() * 1e3,
            window_ms: self.window.as_secs_f64() * 1e3,
            write_syscalls: self.writes.map(|w| w.syscalls),
            write_syscalls_per_sec: self.syscalls_per_sec(),
            bytes_written: self.writes.map(|w| w.bytes),
            bytes_written_per_sec: self.bytes_per_sec(),
            rss_before_bytes: self.rss_before,
            rss_after_bytes: self.rss_after,
            rss_per_lock_bytes: self.rss_per_lock(),
            lost: self.lost,
        }
    }
}

fn per_sec(count: u64, window: Duration) -> f64 {
    let seconds = window.as_secs_f64();
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC_IO: &str = "rchar: 4521\nwchar: 1300\nsyscr: 12\nsyscw: 9\n\
                           read_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n";

    #[test]
    fn proc_io_gives_write_calls_and_bytes() {
        let counters = IoCounters::parse(PROC_IO).unwrap();
        assert_eq!(
            counters,
            IoCounters {
                syscalls: 9,
                bytes: 1300
            }
        );
        assert_eq!(IoCounters::parse("rchar: 1\n"), None);
        let later = IoCounters {
            syscalls: 19,
            bytes: 1500,
        };
        assert_eq!(
            later.since(counters),
            IoCounters {
                syscalls: 10,
                bytes: 200
            }
        );
    }

    #[test]
    fn statm_second_field_is_resident_pages() {
        assert_eq!(resident_pages("2894 812 588 214 0 339 0\n"), Some(812));
        assert_eq!(resident_pages("2894"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_can_be_sampled() {
        assert!(IoCounters::sample().is_some());
        assert!(resident_bytes().is_some_and(|rss| rss > 0));
    }

    #[test]
    fn rates_and_memory_per_lock() {
        let cost = HoldCost {
            locks: 100,
            acquire: Duration::from_millis(50),
            window: Duration::from_secs(2),
            writes: Some(IoCounters {
                syscalls: 400,
                bytes: 10_000,
            }),
            rss_before: Some(1_000_000),
            rss_after: Some(1_409_600),
            lost: 0,
        };
        assert_eq!(cost.syscalls_per_sec(), Some(200.0));
        assert_eq!(cost.bytes_per_sec(), Some(5_000.0));
        assert_eq!(cost.rss_per_lock(), Some(4_096.0));
        let blind = HoldCost {
            writes: None,
            rss_after: None,
            ..cost
        };
        assert_eq!(blind.syscalls_per_sec(), None);
        assert_eq!(blind.rss_per_lock(), None);
    }
}
