//! `distlock-test-servers NAME...`: starts the named test servers on free
//! loopback ports with temporary data dirs, through the testkit the tests
//! use, for `scripts/bench.sh` and for manual runs.
//!
//! Unlike the tests' servers, these keep their data on disk (in the
//! system temp dir, or `$DISTLOCK_TEST_DATA_ROOT`), so syncs cost what
//! they cost in a deployment.
//!
//! Names: `redis` (one instance), `redis-cluster` (3 masters),
//! `redis-sentinel` (a master, its replica and 3 sentinels), `redlock`
//! (5 independent masters), `etcd` (one member, with fsync like a real
//! deployment), `zookeeper` (standalone), `postgres` (one server, fsync
//! on as by default), `pgbouncer` (PgBouncer in transaction mode in front
//! of a server of its own; the URL is the bouncer's). The servers start in parallel;
//! once each answers its readiness probe it is printed as one line
//! `NAME URL` (bare URL, no options), in command-line order, then a line
//! `ready`.
//!
//! Guarantees: the servers are killed (`SIGKILL` to each process group)
//! and their temp dirs removed when stdin reaches EOF or this process gets
//! `SIGTERM` or `SIGINT`, also while they are still starting. If this
//! process dies any other way, the kernel kills each server's main process
//! (parent-death signal; see `distlock_testkit::spawn_child`), but its temp dir
//! stays behind. If a server cannot start (e.g. its program is missing),
//! the testkit's message goes to stderr, every server started so far is
//! killed, and the exit code is 1 (2 for an unknown name).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use distlock_testkit::pgbouncer::PgBouncer;
use distlock_testkit::postgres::PgServer;
use distlock_testkit::{etcd, redis, redis_sentinel, zookeeper, Server};
use tokio::signal::unix::{signal, SignalKind};

/// Masters of the Redlock deployment.
const REDLOCK_MASTERS: usize = 5;
/// Masters of the Redis Cluster.
const CLUSTER_MASTERS: usize = 3;
/// How long shutting down waits for blocking calls still in flight.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
/// Every name this program knows.
const NAMES: &[&str] = &[
    "redis",
    "redis-cluster",
    "redis-sentinel",
    "redlock",
    "etcd",
    "zookeeper",
    "postgres",
    "pgbouncer",
];

/// The servers of one name, and the URL to reach them.
type Started = (Vec<Server>, String);

/// Starts the servers of `name`; the error is the testkit's message.
async fn start(name: String) -> Result<Started, String> {
    let addrs = |servers: &[Server]| servers.iter().map(Server::addr).collect::<Vec<_>>();
    match name.as_str() {
        "redis" => {
            let server = redis::redis_spec("redis")?.start().await?;
            let url = format!("redis://{}", server.addr());
            Ok((vec![server], url))
        }
        "redis-cluster" => {
            let servers = redis::start_cluster(CLUSTER_MASTERS).await?;
            let url = redis::cluster_url(addrs(&servers));
            Ok((servers, url))
        }
        "redis-sentinel" => {
            let group = redis_sentinel::SentinelGroup::start("redis-sentinel").await?;
            let url = group.url();
            let mut servers = vec![group.master, group.replica];
            servers.extend(group.sentinels);
            Ok((servers, url))
        }
        "redlock" => {
            let servers = redis::start_masters("redlock", REDLOCK_MASTERS).await?;
            let url = redis::redlock_url(addrs(&servers));
            Ok((servers, url))
        }
        "etcd" => {
            let server = etcd::etcd_spec("etcd", true)?.start().await?;
            let url = etcd::etcd_url([server.addr()]);
            Ok((vec![server], url))
        }
        "zookeeper" => {
            let server = zookeeper::standalone_spec()?.start().await?;
            let url = zookeeper::zk_url(&[server.addr()], "", "");
            Ok((vec![server], url))
        }
        "postgres" | "pgbouncer" => start_postgres(&name).await,
        _ => Err(format!("unknown server {name:?}")),
    }
}

/// Starts a PostgreSQL server, and for `pgbouncer` a bouncer in front of
/// it (whose URL is then the one printed).
async fn start_postgres(name: &str) -> Result<Started, String> {
    let backend = PgServer::start("postgres").await?;
    if name != "pgbouncer" {
        let url = backend.url();
        return Ok((vec![backend.into_server()], url));
    }
    let bouncer = PgBouncer::start(&backend).await?;
    let url = bouncer.url();
    Ok((vec![bouncer.into_server(), backend.into_server()], url))
}

/// Starts every server of `names` in parallel and prints their URLs in
/// order, then `ready`. Returns the servers to keep running.
async fn start_all(names: Vec<String>) -> Result<Vec<Server>, String> {
    let tasks: Vec<_> = names
        .into_iter()
        .map(|name| (name.clone(), tokio::spawn(start(name))))
        .collect();
    let mut running = Vec::new();
    let mut out = std::io::stdout().lock();
    for (name, task) in tasks {
        let (servers, url) = task.await.map_err(|e| format!("{name}: {e}"))??;
        running.extend(servers);
        writeln!(out, "{name} {url}")
            .and_then(|()| out.flush())
            .map_err(|e| format!("stdout: {e}"))?;
    }
    writeln!(out, "ready")
        .and_then(|()| out.flush())
        .map_err(|e| format!("stdout: {e}"))?;
    Ok(running)
}

/// Installs the SIGTERM and SIGINT handlers at once, and returns a future
/// that completes when stdin reaches EOF (or fails) or on either signal.
fn shutdown_requested() -> Result<impl std::future::Future<Output = ()>, String> {
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM: {e}"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| format!("SIGINT: {e}"))?;
    let (eof_tx, eof) = tokio::sync::oneshot::channel::<()>();
    // A plain thread: a blocking read cannot be cancelled, and the thread
    // must not keep the runtime from shutting down.
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        let _ = eof_tx.send(());
    });
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = eof => {}
        }
    })
}

fn main() -> ExitCode {
    // Benchmarks must pay for the servers' disk syncs as a deployment does.
    distlock_testkit::keep_data_on_disk();
    let names: Vec<String> = std::env::args().skip(1).collect();
    if names.is_empty() || names.iter().any(|n| !NAMES.contains(&n.as_str())) {
        eprintln!(
            "usage: distlock-test-servers NAME...  (NAME: {})\n\
             prints `NAME URL` per server, then `ready`; \
             stops them when stdin closes or on SIGTERM/SIGINT",
            NAMES.join(", ")
        );
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("tokio runtime: {e}")),
    };
    let code = runtime.block_on(run(names));
    // Drops the tasks of servers still starting, which kills them. A
    // blocking call in flight (`redis-cli --cluster create` waiting for
    // nodes just killed) is not waited for beyond this; the testkit's
    // exit hook then kills any process group left and removes temp dirs.
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    code
}

/// Starts the servers, keeps them until asked to stop, then kills them.
async fn run(names: Vec<String>) -> ExitCode {
    // Handlers are in place before the first server starts, so a signal
    // during start-up still stops what was started.
    let shutdown = match shutdown_requested() {
        Ok(shutdown) => shutdown,
        Err(e) => return fail(&e),
    };
    tokio::pin!(shutdown);
    let servers = tokio::select! {
        biased; // a start-up error is reported even if stdin is closed
        started = start_all(names) => started,
        () = &mut shutdown => return ExitCode::SUCCESS,
    };
    match servers {
        Ok(servers) => {
            shutdown.await;
            // Dropping a Server kills its process group and removes its
            // temp dir.
            drop(servers);
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

/// Reports `error` on stderr; exit code 1.
fn fail(error: &str) -> ExitCode {
    eprintln!("distlock-test-servers: {error}");
    ExitCode::FAILURE
}
