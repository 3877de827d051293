//! Failover after a leader crash: from the crash to the waiting candidate
//! leading.
//!
//! Where every lock has a lease of its own, a crash is a leaked guard in
//! this process: renewal stops, nothing is released, and the store frees
//! the lock when the lease runs out. Where a lock lasts as long as the
//! session or process that took it (the file store's `flock`, etcd's
//! session lease, ZooKeeper's ephemeral node), a leaked guard would last as
//! long as this process, so the leader is a child `distlock elect` process
//! instead, killed with SIGKILL once it leads.

use std::process::Stdio;
use std::time::{Duration, Instant};

use distlock::{LockOptions, Locker, LockerOptions};
use tokio::process::{Child, Command};

use super::failover::{candidate, election, led};
use super::{describe, open, within, Crash, CrashKind, PATIENCE};
use crate::bench::measure::WAITER_SETTLE;
use crate::bench::opener::Opener;

/// The lease of the crash failover's lockers: what a crashed leader costs.
pub(crate) const CRASH_TTL: Duration = Duration::from_secs(1);
/// Crash failovers measured, all at once on elections of their own, so
/// that the row costs one ttl, not one per sample.
const CRASH_SAMPLES: usize = 3;
/// The value the crashing leader campaigns with.
const CRASHING: &str = "crashing";

/// [`CRASH_SAMPLES`] concurrent crash failovers: leaked guards where the
/// store has per-lock expiry, killed leader processes elsewhere.
pub(super) async fn after_crash(opener: &Opener) -> Crash {
    let mut crash = Crash::default();
    let per_lock_expiry = match open(opener).await {
        Ok(locker) => locker.capabilities().per_lock_expiry,
        Err(error) => {
            crash.error = Some(error);
            return crash;
        }
    };
    let kind = if per_lock_expiry {
        CrashKind::LeakedGuard
    } else {
        CrashKind::KilledProcess
    };
    crash.kind = kind;
    let samples = (0..CRASH_SAMPLES).map(|i| async move {
        let key = format!("bench/election-crash-{i}");
        match kind {
            CrashKind::LeakedGuard => leaked_guard(opener, &key).await,
            CrashKind::KilledProcess => killed_process(opener, &key).await,
        }
    });
    for sample in futures_util::future::join_all(samples).await {
        match sample {
            Ok((from_crash, from_lease_start)) => {
                crash.from_crash.push(from_crash);
                crash.from_lease_start.extend(from_lease_start);
            }
            Err(error) => {
                crash.error.get_or_insert(error);
            }
        }
    }
    crash
}

/// One crash failover in process: a holder takes the lock with a
/// [`CRASH_TTL`] lease, a candidate starts campaigning, the holder's guard
/// is leaked. Returns the times from the leak and from the holder's lock
/// call to the candidate leading.
async fn leaked_guard(opener: &Opener, key: &str) -> Result<(Duration, Option<Duration>), String> {
    let holder = short_lease(open(opener).await?);
    let next = short_lease(open(opener).await?);
    let lease_start = Instant::now();
    let guard = holder
        .lock_with(key, LockOptions::new().value(CRASHING).wait(PATIENCE))
        .await
        .map_err(|e| format!("lock: {}", describe(&e)))?;
    let wait = CRASH_TTL + PATIENCE;
    let waiting = candidate(&election(&next, key)?, "next".to_owned(), wait);
    tokio::time::sleep(WAITER_SETTLE).await;
    // Renewal stops and nothing is released, as if the process had died.
    guard.leak();
    let leaked = Instant::now();
    let (led_at, leader) = led(waiting, wait, "the leader crashed").await?;
    leader
        .resign()
        .await
        .map_err(|e| format!("resign: {}", describe(&e)))?;
    Ok((
        led_at.saturating_duration_since(leaked),
        Some(led_at.saturating_duration_since(lease_start)),
    ))
}

/// One crash failover across processes: a child `distlock elect` (same
/// store, namespace, and a [`CRASH_TTL`] ttl) leads, a candidate here
/// starts campaigning, the child is killed with SIGKILL. Returns the time
/// from the kill to the candidate leading.
async fn killed_process(
    opener: &Opener,
    key: &str,
) -> Result<(Duration, Option<Duration>), String> {
    // ZooKeeper's session timeout is the ttl unless the URL sets its own,
    // which would stand in for the crash's ttl.
    let url = without_option(opener.store.as_str(), "session_timeout");
    let url = with_option(&url, "ttl", &url_duration(CRASH_TTL));
    let url = with_option(&url, "namespace", &opener.namespace);
    let next = distlock::connect(&url)
        .await
        .map_err(|e| format!("connect: {}", opener.store.scrub(&describe(&e))))?;
    let election = election(&next, key)?;
    let mut leaders = election.observe();
    let mut child = spawn_leader(&url, key)?;
    let child_leads = async {
        // The watch never ends: it reports each leader until ours shows.
        while leaders
            .changed()
            .await
            .is_none_or(|leader| leader.value != CRASHING)
        {}
        Ok(())
    };
    let not_leading = || "the child `distlock elect` did not lead".to_owned();
    within(PATIENCE, not_leading, child_leads).await?;
    drop(leaders);
    let wait = CRASH_TTL + PATIENCE;
    let waiting = candidate(&election, "next".to_owned(), wait);
    tokio::time::sleep(WAITER_SETTLE).await;
    child
        .start_kill()
        .map_err(|e| format!("killing the child `distlock elect`: {e}"))?;
    let killed = Instant::now();
    let _ = child.wait().await;
    let (led_at, leader) = led(waiting, wait, "the leader's process was killed").await?;
    leader
        .resign()
        .await
        .map_err(|e| format!("resign: {}", describe(&e)))?;
    Ok((led_at.saturating_duration_since(killed), None))
}

/// `distlock elect KEY --value crashing -- cat`, this executable on `url`
/// (passed in the environment, so no password shows in the process list).
/// `cat` reads a pipe of ours: it ends when the leader is killed (on
/// Linux, `elect` kills its command when it dies) or when this process lets
/// go of the pipe.
fn spawn_leader(url: &str, key: &str) -> Result<Child, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding distlock's executable: {e}"))?;
    Command::new(exe)
        .env(distlock::URL_ENV, url)
        .args(["elect", key, "--value", CRASHING, "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting a child `distlock elect`: {e}"))
}

/// `url` with its query option `name` set to `value`, replacing any value
/// it had.
fn with_option(url: &str, name: &str, value: &str) -> String {
    edit_options(url, name, Some(value))
}

/// `url` without its query option `name`.
fn without_option(url: &str, name: &str) -> String {
    edit_options(url, name, None)
}

/// `url` with every query option `name` removed, then `name=value`
/// appended if given.
fn edit_options(url: &str, name: &str, value: Option<&str>) -> String {
    let (url, fragment) = match url.split_once('#') {
        Some((url, fragment)) => (url, Some(fragment)),
        None => (url, None),
    };
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut options: Vec<String> = query
        .split('&')
        .filter(|option| !option.is_empty() && option.split('=').next() != Some(name))
        .map(str::to_owned)
        .collect();
    options.extend(value.map(|value| format!("{name}={value}")));
    let mut out = base.to_owned();
    if !options.is_empty() {
        out.push('?');
        out.push_str(&options.join("&"));
    }
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

/// Whole seconds as a URL duration (`1s`).
fn url_duration(duration: Duration) -> String {
    format!("{}s", duration.as_secs().max(1))
}

/// `locker` with a [`CRASH_TTL`] lease.
fn short_lease(locker: Locker) -> Locker {
    let options = LockerOptions {
        ttl: CRASH_TTL,
        ..locker.options().clone()
    };
    locker.with_options(options)
}

#[cfg(test)]
mod tests {
    use super::{with_option, without_option};

    #[test]
    fn with_option_sets_replaces_and_keeps_the_rest() {
        assert_eq!(
            with_option("file:///tmp/l", "ttl", "1s"),
            "file:///tmp/l?ttl=1s"
        );
        assert_eq!(
            with_option("etcd://h:1/?ttl=30s&wait=2s", "ttl", "1s"),
            "etcd://h:1/?wait=2s&ttl=1s"
        );
        assert_eq!(
            with_option("redis://a:1,b:2/?ttlx=3#f", "ttl", "1s"),
            "redis://a:1,b:2/?ttlx=3&ttl=1s#f"
        );
        assert_eq!(
            without_option("zk://h:1/?session_timeout=10s&ttl=2s", "session_timeout"),
            "zk://h:1/?ttl=2s"
        );
        assert_eq!(
            without_option("zk://h:1/?session_timeout=10s", "session_timeout"),
            "zk://h:1/"
        );
    }
}
