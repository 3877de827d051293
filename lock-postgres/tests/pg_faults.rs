//! Fault tests for the PostgreSQL store, each on a server of its own: a
//! holder process frozen past its ttl (its write fenced by `holds()` in
//! the database itself) or killed, the server killed and restarted within
//! and past the ttl, the store's connections terminated by the server,
//! and the network cut or slowed through a fault proxy.
//!
//! Holders that must be frozen or killed run in a child process: this test
//! binary run again with `DISTLOCK_PG_HOLDER` set, executing the ignored
//! test `holder_process`, which reports on its stdout.

mod common;

use common::{connect, raw, url_on};

use std::time::{Duration, Instant};

use distlock_testkit::child::TestChild;
use distlock_testkit::postgres::PgServer;
use distlock_testkit::scenarios::{freed_after_kill, FreedWithin};
use distlock_testkit::{
    assert_not_before, eventually, pause_group, resume_group, signal_group, FaultProxy,
};
use lock_core::{LockError, LockOptions, LossReason};
use tokio_postgres::Client;

/// Tells a child run of this binary to hold a lock: `LOCKER_URL
/// SERVER_URL NAMESPACE`.
const HOLDER_ENV: &str = "DISTLOCK_PG_HOLDER";
/// Slack for scheduling on a busy 2-core machine.
const SLACK: Duration = Duration::from_secs(3);
/// How long a 2 s session, renewed every third of it, runs at least after
/// its locker is frozen or killed.
const SESSION_LEFT: Duration = Duration::from_millis(1200);

fn wait(d: Duration) -> LockOptions {
    LockOptions::new().wait(d)
}

/// A server of its own for one test.
async fn server(name: &str) -> PgServer {
    PgServer::start(name).await.expect("a PostgreSQL server")
}

/// The fenced write every holder makes: the row takes `token` only while
/// the database says that entry holds `k` in `namespace`. Returns the
/// number of rows written (0: refused).
async fn fenced_write(client: &Client, namespace: &str, token: i64) -> Result<u64, String> {
    client
        .execute(
            "UPDATE fenced SET holder = $1, writes = writes + 1 \
             WHERE id = 1 AND distlock.holds($2, 'k', $1)",
            &[&token, &namespace],
        )
        .await
        .map_err(|e| e.to_string())
}

// ------------------------------------------------------------ holder child

/// Not a test: the lock holder run in a child process by the tests below.
/// Prints `HELD <token>`, then every 50 ms makes its fenced write and
/// prints `WRITE <rows written>`, and once its guard reports the loss,
/// `LOST <reason>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process for the holder fault tests"]
async fn holder_process() {
    let Ok(spec) = std::env::var(HOLDER_ENV) else {
        return;
    };
    let [url, server_url, namespace] = spec.split(' ').collect::<Vec<_>>()[..] else {
        panic!("LOCKER_URL SERVER_URL NAMESPACE");
    };
    let locker = connect(url).await;
    let client = raw(server_url).await;
    let guard = locker.lock("k").await.expect("lock");
    let token = i64::try_from(guard.token().get()).unwrap();
    println!("HELD {token}");
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Work first, then look: the first write after a freeze is stale,
        // which is what fencing is for.
        match fenced_write(&client, namespace, token).await {
            Ok(rows) => println!("WRITE {rows}"),
            Err(error) => println!("ERROR {error}"),
        }
        if let Some(reason) = guard.loss_signal().loss_reason() {
            println!("LOST {reason:?}");
            return;
        }
    }
}

/// A holder child on `server` with a 2 s ttl, holding `k` in `namespace`
/// after one accepted fenced write: the child and its token.
async fn held_by_a_child(server: &PgServer, namespace: &str) -> (TestChild, i64) {
    let client = raw(&server.url()).await;
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS fenced (id int PRIMARY KEY, holder bigint, \
             writes int NOT NULL); INSERT INTO fenced VALUES (1, NULL, 0) ON CONFLICT DO NOTHING",
        )
        .await
        .unwrap();
    let url = url_on(server, namespace, "ttl=2s");
    let value = format!("{url} {} {namespace}", server.url());
    let mut holder = TestChild::spawn("holder_process", HOLDER_ENV, &value).await;
    let token = holder.expect("HELD").await.parse().unwrap();
    assert_eq!(
        holder.expect("WRITE").await,
        "1",
        "the holder's write refused"
    );
    (holder, token)
}

/// A holder frozen past its ttl loses the lock to another client; the
/// database itself refuses the write it makes with its old token when it
/// wakes, and its guard reports the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_holder_is_replaced_and_the_database_refuses_its_write() {
    let server = server("pg-frozen").await;
    let (mut holder, old_token) = held_by_a_child(&server, "frozen").await;
    pause_group(holder.pid()).await.unwrap();
    let paused_at = Instant::now();

    let locker = connect(&url_on(&server, "frozen", "ttl=2s")).await;
    let guard = locker
        .lock_with("k", wait(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_not_before(paused_at, SESSION_LEFT, "in while the frozen session lived");
    let new_token = i64::try_from(guard.token().get()).unwrap();
    assert!(new_token > old_token, "{new_token} after {old_token}");
    let client = raw(&server.url()).await;
    assert_eq!(fenced_write(&client, "frozen", new_token).await, Ok(1));

    // Lines printed before the freeze are of no interest now.
    while holder.lines.try_recv().is_ok() {}
    resume_group(holder.pid()).unwrap();
    let mut refused = 0;
    let reason = loop {
        let line = holder.next_line(Duration::from_secs(10)).await;
        if line == "WRITE 0" {
            refused += 1;
        } else if let Some(reason) = line.strip_prefix("LOST ") {
            break reason.to_owned();
        }
    };
    assert!(refused >= 1, "the woken holder made no refused write");
    assert_eq!(reason, "SessionExpired");
    let row = client
        .query_one("SELECT holder FROM fenced WHERE id = 1", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), new_token, "a stale write landed");
    assert!(guard.is_held());
    guard.release().await.unwrap();
}

/// A holder killed with SIGKILL keeps the lock until its session expires
/// on the server: not freed at once, not never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_frees_the_lock_after_the_ttl() {
    let server = server("pg-killed").await;
    let (holder, token) = held_by_a_child(&server, "killed").await;
    let other = connect(&url_on(&server, "killed", "ttl=2s")).await;
    let bounds = FreedWithin {
        not_before: SESSION_LEFT,
        wait: Duration::from_secs(2) + SLACK,
    };
    let kill = || signal_group(holder.pid(), libc::SIGKILL).unwrap();
    freed_after_kill(kill, &other, ("k", u64::try_from(token).unwrap()), bounds).await;
}

// ------------------------------------------------------------ server faults

/// The latest session expiry on `server` is `at_least` ahead of now: a
/// renewal reached it.
async fn renewed_ahead(server: &PgServer, at_least: Duration) -> Result<(), String> {
    let sql = format!(
        "SELECT max(expires_at) > now() + interval '{} ms' FROM distlock.sessions",
        at_least.as_millis()
    );
    match server.psql(&sql).await?.as_str() {
        "t" => Ok(()),
        other => Err(format!("no session renewed that far ahead: {other:?}")),
    }
}

/// A server killed and restarted within the ttl keeps its locks: the
/// holder is not told anything, its session is renewed again, the lock
/// stays held against others, and tokens keep rising.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_shorter_than_the_ttl_keeps_the_locks() {
    const TTL: Duration = Duration::from_secs(9);
    let server = server("pg-restart-short").await;
    let url = url_on(&server, "short", "ttl=9s");
    let (a, b) = (connect(&url).await, connect(&url).await);
    let guard = a.lock("k").await.unwrap();
    let started = Instant::now();
    server.restart().await.unwrap();
    let downtime = started.elapsed();
    assert!(
        downtime < TTL / 3,
        "the restart took {downtime:?}: too slow to test"
    );
    // A renewal after the restart pushes the session past what it had.
    eventually(TTL, "a renewal after the restart", || {
        renewed_ahead(&server, TTL * 2 / 3 + Duration::from_millis(500))
    })
    .await
    .unwrap();
    assert_eq!(guard.loss_signal().loss_reason(), None, "told a loss");
    assert!(
        b.try_lock("k").await.unwrap().is_none(),
        "the lock was free"
    );
    let held = guard.token();
    guard.release().await.unwrap();
    let next = b.lock_with("k", wait(SLACK)).await.unwrap();
    assert!(next.token() > held, "{} after {held}", next.token());
    next.release().await.unwrap();
}

/// A server down for longer than the ttl: the holder is told its lock is
/// lost while the server is away, and after the restart the lock is free
/// for others with a higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_longer_than_the_ttl_expires_the_locks() {
    let server = server("pg-restart-long").await;
    let url = url_on(&server, "long", "ttl=2s");
    let a = connect(&url).await;
    let guard = a.lock("k").await.unwrap();
    let held = guard.token();
    server.kill().await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(2) + SLACK, guard.lost())
        .await
        .expect("no loss heard while the server was down");
    assert_eq!(reason, LossReason::SessionExpired);
    server.server().restart().await.unwrap();
    let b = connect(&url).await;
    let next = b.lock_with("k", wait(SLACK)).await.unwrap();
    assert!(next.token() > held, "{} after {held}", next.token());
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
    next.release().await.unwrap();
}

/// The store's connections terminated by the server (`pg_terminate_backend`,
/// as an operator or a failover tool does): the pool and the LISTEN
/// connection come back, and a release still reaches the waiter by
/// notification, well before the periodic re-check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_connections_come_back_without_missing_a_hand_off() {
    let server = server("pg-terminated").await;
    let url = url_on(&server, "terminated", "ttl=30s");
    let (a, b) = (connect(&url).await, connect(&url).await);
    let guard = a.lock("k").await.unwrap();
    let waiter = tokio::spawn(async move {
        let next = b.lock_with("k", wait(Duration::from_secs(60))).await?;
        let at = Instant::now();
        next.release().await?;
        Ok::<_, LockError>(at)
    });
    let listening = "SELECT count(*) FROM pg_stat_activity \
                     WHERE application_name = 'distlock' AND query LIKE 'LISTEN%'";
    let one_listener = || async {
        match server.psql(listening).await?.as_str() {
            "1" => Ok(()),
            other => Err(format!("{other} LISTEN connections")),
        }
    };
    eventually(SLACK, "the waiter's LISTEN connection", one_listener)
        .await
        .unwrap();
    let terminated = server
        .psql(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = 'distlock') t",
        )
        .await
        .unwrap();
    assert!(
        terminated.parse::<u32>().unwrap() >= 3,
        "terminated {terminated}"
    );
    // The waiter is back on a new LISTEN connection before the release.
    eventually(SLACK, "a new LISTEN connection", one_listener)
        .await
        .unwrap();
    guard.release().await.unwrap();
    let released_at = Instant::now();
    let taken_at = waiter.await.unwrap().unwrap();
    let handoff = taken_at.saturating_duration_since(released_at);
    assert!(
        handoff < Duration::from_secs(2),
        "handed over after {handoff:?}"
    );
}

// ------------------------------------------------------------ network

/// A fault proxy in front of `server`: lockers through it and beside it.
struct Proxied {
    proxy: FaultProxy,
    through: String,
    direct: String,
}

fn proxied(server: &PgServer, namespace: &str, ttl: &str) -> Proxied {
    let target = format!("127.0.0.1:{}", server.server().port())
        .parse()
        .unwrap();
    let proxy = FaultProxy::start(target).unwrap();
    let direct = url_on(server, namespace, &format!("ttl={ttl}"));
    let through = direct.replace(
        &format!(":{}/", server.server().port()),
        &format!(":{}/", proxy.port()),
    );
    assert_ne!(through, direct);
    Proxied {
        proxy,
        through,
        direct,
    }
}

/// With the network to the server cut, the holder hears the loss before
/// its session can have expired on the server, so before anyone else can
/// hold the lock; once the network is back, the same locker works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_network_signals_the_loss_before_others_acquire() {
    let server = server("pg-cut").await;
    let net = proxied(&server, "cut", "2s");
    let (holder, other) = (connect(&net.through).await, connect(&net.direct).await);
    let guard = holder.lock("k").await.unwrap();
    net.proxy.cut();
    let waiter = tokio::spawn(async move {
        let next = other.lock_with("k", wait(Duration::from_secs(10))).await?;
        let at = Instant::now();
        next.release().await?;
        Ok::<_, LockError>(at)
    });
    let reason = tokio::time::timeout(Duration::from_secs(2) + SLACK, guard.lost())
        .await
        .expect("the loss was not signalled");
    let lost_at = Instant::now();
    assert_eq!(reason, LossReason::SessionExpired);
    let taken_at = waiter.await.unwrap().unwrap();
    assert!(lost_at <= taken_at, "another client held the lock first");
    net.proxy.restore();
    eventually(SLACK * 3, "the locker to work again", || async {
        holder
            .lock_with("k", wait(Duration::from_secs(1)))
            .await?
            .release()
            .await
    })
    .await
    .unwrap();
}

/// A slow network (100 ms each way) delays, but keeps every lock: no loss
/// under latency far below the ttl, and hand-offs still happen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_network_keeps_the_locks() {
    let server = server("pg-slow").await;
    let net = proxied(&server, "slow", "3s");
    let (a, b) = (connect(&net.through).await, connect(&net.through).await);
    net.proxy.set_latency(Duration::from_millis(100));
    let guard = a.lock("k").await.unwrap();
    let waiter = tokio::spawn(async move { b.lock_with("k", wait(Duration::from_secs(20))).await });
    // Past two ttls of renewals through the slow link.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        guard.loss_signal().loss_reason(),
        None,
        "lost under latency"
    );
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    let held = guard.token();
    guard.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    assert!(next.token() > held);
    assert_eq!(next.loss_signal().loss_reason(), None);
    next.release().await.unwrap();
}
