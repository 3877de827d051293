//! PostgreSQL servers for tests: a server of its own per fault test, one
//! shared per test binary, with its `postgres://` URL. PgBouncer in front
//! of one is in [`crate::pgbouncer`], a primary with a streaming standby in
//! [`crate::pg_standby`].
//!
//! Each server is a fresh cluster made by `initdb` in the server's data
//! dir, with the superuser [`SUPERUSER`] and a password of its own, run by
//! `postgres` itself (no `pg_ctl` wrapper) listening on a free 127.0.0.1
//! port. PostgreSQL refuses to run as root: when the tests run as root,
//! `initdb` and the server run as [`UNPRIVILEGED_USER`]. The shared server
//! can also come from `DISTLOCK_TEST_PG_URL` instead of being spawned.
//!
//! [`UNPRIVILEGED_USER`]: crate::unprivileged::UNPRIVILEGED_USER

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::OnceCell;

use crate::unprivileged::RunAs;
use crate::unprivileged::{run_tool, unprivileged_user};
use crate::{env_override, eventually, find_program, probe, procfs, Server, ServerSpec};
use crate::{ServerContext, PG_URL_VAR};

/// PostgreSQL's port when a URL names none.
pub const DEFAULT_PORT: u16 = 5432;
/// URL options that make a locker fail within seconds on an unreachable
/// server, yet leave room for the logins of the conformance suite's 40
/// lockers at once (each with its pool) on a busy machine: with 1 s to
/// connect, a pooled connection was sometimes not made in time.
pub const TEST_TIMEOUTS: &str = "connect_timeout=3s&response_timeout=3s";
/// The superuser every test server is created with.
pub const SUPERUSER: &str = "distlock";
/// The database the URLs name (created by `initdb`).
pub const DATABASE: &str = "postgres";
/// Where Debian installs each major version's server programs
/// (`<major>/bin/postgres`, `initdb`, `pg_ctl`, `pg_basebackup`), which
/// are not on `PATH`.
pub const DEBIAN_LIB_DIR: &str = "/usr/lib/postgresql";
/// The cluster's directory inside the server's data dir; the data dir
/// itself also holds the Unix socket.
const CLUSTER_DIR: &str = "pgdata";
/// How long killed server processes get to disappear.
const EXIT_LIMIT: Duration = Duration::from_secs(30);

/// The dir holding PostgreSQL's server programs: on Debian the highest
/// major version under [`DEBIAN_LIB_DIR`], elsewhere the dir of the
/// `initdb` found on `PATH`.
pub fn bin_dir() -> Result<PathBuf, String> {
    let highest = std::fs::read_dir(DEBIAN_LIB_DIR)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let major: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("postgres").is_file().then_some((major, bin))
        })
        .max_by_key(|(major, _)| *major);
    if let Some((_, bin)) = highest {
        return Ok(bin);
    }
    let hint = crate::install_hint("postgresql", PG_URL_VAR);
    let initdb = find_program(&["initdb"], &hint)?;
    Ok(initdb.parent().map(Path::to_owned).unwrap_or_default())
}

/// The PostgreSQL program `name` (`postgres`, `initdb`, `pg_ctl`, ...)
/// from [`bin_dir`], or what to install.
pub fn pg_program(name: &str) -> Result<PathBuf, String> {
    let path = bin_dir()?.join(name);
    let hint = crate::install_hint("postgresql", PG_URL_VAR);
    find_program(&[path.to_str().unwrap_or(name)], &hint)
}

/// A PostgreSQL startup message (protocol 3.0) for `user` and `database`.
pub fn startup_message(user: &str, database: &str) -> Vec<u8> {
    let mut body = 196_608_u32.to_be_bytes().to_vec(); // protocol 3.0
    for text in ["user", user, "database", database, ""] {
        body.extend_from_slice(text.as_bytes());
        body.push(0);
    }
    let mut message = u32::try_from(body.len() + 4)
        .unwrap_or(u32::MAX)
        .to_be_bytes()
        .to_vec();
    message.extend(body);
    message
}

/// Ready once a connection's startup message for [`SUPERUSER`] is
/// answered with a SCRAM-SHA-256 password request: the server accepts
/// connections (not "starting up" or "in recovery") and requires the
/// password. Used for PostgreSQL and PgBouncer alike.
pub fn scram_probe(spec: ServerSpec) -> ServerSpec {
    let startup = startup_message(SUPERUSER, DATABASE);
    spec.probe(move |ctx| {
        let (addr, startup) = (ctx.addr(), startup.clone());
        Box::pin(async move { probe::tcp_request(addr, &startup, "SCRAM-SHA-256").await })
    })
}

/// A fresh random password for a test server.
pub(crate) fn new_password() -> String {
    format!("pw-{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// The `postgres://` URL of `SUPERUSER` with `password` at `port`.
pub fn pg_url(port: u16, password: &str) -> String {
    format!("postgres://{SUPERUSER}:{password}@127.0.0.1:{port}/{DATABASE}")
}

/// The cluster's dir inside a server's data dir.
pub fn cluster_dir(ctx: &ServerContext) -> PathBuf {
    ctx.data_dir.join(CLUSTER_DIR)
}

/// How the cluster of a new server comes to be.
#[derive(Clone)]
pub(crate) enum Origin {
    /// `initdb` with this superuser password.
    InitDb(String),
    /// `pg_basebackup -R` from the server on this port, whose superuser
    /// has this password.
    BaseBackup(u16, String),
}

/// A server spec: the cluster made as `origin` says, then `postgres` on
/// it with `settings` (`-c name=value`) on top of the loopback address
/// and socket dir. Runs as `user`.
pub(crate) fn spec(
    name: &str,
    origin: Origin,
    settings: Vec<String>,
    user: Option<RunAs>,
) -> Result<ServerSpec, String> {
    let (initdb, basebackup) = (pg_program("initdb")?, pg_program("pg_basebackup")?);
    let mut spec = ServerSpec::new(name, pg_program("postgres")?)
        .args(move |ctx| server_args(ctx, &settings))
        .init(move |ctx| {
            let (ctx, origin) = (ctx.clone(), origin.clone());
            let (initdb, basebackup) = (initdb.clone(), basebackup.clone());
            Box::pin(async move {
                match origin {
                    Origin::InitDb(password) => init_cluster(&initdb, &ctx, &password, user).await,
                    Origin::BaseBackup(port, password) => {
                        base_backup(&basebackup, &ctx, port, &password, user).await
                    }
                }
            })
        });
    if let Some(user) = user {
        spec = spec.run_as(user);
    }
    Ok(scram_probe(spec))
}

/// `postgres`'s arguments. Every setting not named here is PostgreSQL's
/// default (`max_connections` 100, `fsync` on, `synchronous_commit` on):
/// only the listen address (loopback, not `localhost`'s IPv6 too) and the
/// socket dir (inside the data dir, not `/var/run/postgresql`) change.
fn server_args(ctx: &ServerContext, settings: &[String]) -> Vec<String> {
    let mut args = vec![
        "-D".to_owned(),
        cluster_dir(ctx).display().to_string(),
        "-p".to_owned(),
        ctx.port.to_string(),
        "-k".to_owned(),
        ctx.data_dir.display().to_string(),
        "-c".to_owned(),
        "listen_addresses=127.0.0.1".to_owned(),
    ];
    for setting in settings {
        args.extend(["-c".to_owned(), setting.clone()]);
    }
    args
}

/// Runs `initdb` for [`SUPERUSER`] with `password`, requiring it (SCRAM-
/// SHA-256) on every connection, TCP and Unix socket. UTF-8 with the C
/// locale, so that results do not depend on the machine's locale.
async fn init_cluster(
    initdb: &Path,
    ctx: &ServerContext,
    password: &str,
    user: Option<RunAs>,
) -> Result<(), String> {
    let password_file = ctx.data_dir.join("password");
    std::fs::write(&password_file, format!("{password}\n"))
        .map_err(|e| format!("write {}: {e}", password_file.display()))?;
    if let Some(user) = user {
        std::os::unix::fs::chown(&password_file, Some(user.uid), Some(user.gid))
            .map_err(|e| format!("chown {}: {e}", password_file.display()))?;
    }
    let cluster = cluster_dir(ctx);
    let pwfile = format!("--pwfile={}", password_file.display());
    let args: [&OsStr; 9] = [
        "-D".as_ref(),
        cluster.as_os_str(),
        "-U".as_ref(),
        SUPERUSER.as_ref(),
        pwfile.as_ref(),
        "--auth=scram-sha-256".as_ref(),
        "--encoding=UTF8".as_ref(),
        "--locale=C".as_ref(),
        "--no-instructions".as_ref(),
    ];
    let done = run_tool(initdb, &args, &[], user).await;
    let _ = std::fs::remove_file(&password_file);
    done.map(drop)
}

/// Copies the cluster of the server on `port` into this server's cluster
/// dir with `pg_basebackup -R` (WAL streamed alongside, then the copy
/// set up as a standby following that server).
async fn base_backup(
    basebackup: &Path,
    ctx: &ServerContext,
    port: u16,
    password: &str,
    user: Option<RunAs>,
) -> Result<(), String> {
    let cluster = cluster_dir(ctx);
    let port = port.to_string();
    let mut args = superuser_at(&port).to_vec();
    args.extend::<[&OsStr; 7]>([
        "-D".as_ref(),
        cluster.as_os_str(),
        "-R".as_ref(),
        "-X".as_ref(),
        "stream".as_ref(),
        "-c".as_ref(),
        "fast".as_ref(),
    ]);
    run_tool(basebackup, &args, &[("PGPASSWORD", password)], user)
        .await
        .map(drop)
}

/// A PostgreSQL server of a test's own (see the module docs), for tests
/// that kill, restart or otherwise disturb it.
pub struct PgServer {
    server: Server,
    password: String,
}

impl fmt::Debug for PgServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The password is left out.
        f.debug_struct("PgServer")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl PgServer {
    /// Creates a fresh cluster and starts `postgres` on a free port,
    /// waiting until it accepts connections.
    pub async fn start(name: &str) -> Result<Self, String> {
        Self::start_with(name, Vec::new()).await
    }

    /// Like [`PgServer::start`], with extra settings (`name=value`, given
    /// to `postgres` as `-c name=value`). A test that changes one says
    /// why.
    pub async fn start_with(name: &str, settings: Vec<String>) -> Result<Self, String> {
        let password = new_password();
        let user = unprivileged_user()?;
        let spec = spec(name, Origin::InitDb(password.clone()), settings, user)?;
        Ok(Self::from_parts(spec.start().await?, password))
    }

    /// Wraps a started server whose superuser has `password`.
    pub(crate) fn from_parts(server: Server, password: String) -> Self {
        Self { server, password }
    }

    /// `postgres://distlock:<password>@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        pg_url(self.server.port(), &self.password)
    }

    /// The superuser's password.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The supervised `postgres` process (the postmaster).
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// The main process only; its children (backends, background
    /// workers) exit by themselves once it is gone.
    pub fn into_server(self) -> Server {
        self.server
    }

    /// The cluster's dir (`PGDATA`), kept across restarts.
    pub fn cluster_dir(&self) -> PathBuf {
        cluster_dir(self.server.context())
    }

    /// The postmaster's child processes now (backends, background
    /// workers), each its own process group.
    pub(crate) fn processes(&self) -> Vec<u32> {
        self.server
            .pid()
            .map(procfs::children_of)
            .unwrap_or_default()
    }

    /// Kills the whole server at once with `SIGKILL`, like a crash: the
    /// postmaster (frozen first, so it forks nothing new) and every child
    /// process (backends, checkpointer, WAL writer, ...; each in its own
    /// process group). Returns once all of them are gone, so that a
    /// restart finds the shared memory free. Does nothing if the server
    /// is not running.
    pub async fn kill(&self) -> Result<(), String> {
        let Some(postmaster) = self.server.pid() else {
            return Ok(());
        };
        self.server.pause().await?;
        let children = procfs::children_of(postmaster);
        for child in &children {
            // SAFETY: kill(2) has no memory-safety preconditions. The
            // children cannot be reaped (their pids reused) before this:
            // their parent is frozen.
            unsafe {
                libc::kill(*child as libc::pid_t, libc::SIGKILL);
            }
        }
        self.server.stop();
        eventually(EXIT_LIMIT, "the killed server's processes to exit", || {
            let children = children.clone();
            async move { children.iter().all(|pid| procfs::process_gone(*pid)) }
        })
        .await
    }

    /// Kills the server like [`PgServer::kill`] and starts it again on the
    /// same port and cluster, waiting until it accepts connections (crash
    /// recovery replays the WAL first).
    pub async fn restart(&self) -> Result<(), String> {
        self.kill().await?;
        self.server.restart().await
    }

    /// Runs `sql` with `psql` as the superuser and returns its output
    /// (unaligned, tuples only: one line per row, `|` between columns).
    pub async fn psql(&self, sql: &str) -> Result<String, String> {
        psql(self.server.port(), &self.password, sql).await
    }
}

/// A client tool's arguments that reach the server on loopback `port` as
/// [`SUPERUSER`] (its password goes in `PGPASSWORD`, never in arguments).
fn superuser_at(port: &str) -> [&OsStr; 6] {
    [
        "-h".as_ref(),
        "127.0.0.1".as_ref(),
        "-p".as_ref(),
        port.as_ref(),
        "-U".as_ref(),
        SUPERUSER.as_ref(),
    ]
}

/// Runs `sql` with `psql` against the server on `port` as [`SUPERUSER`]
/// with `password`; see [`PgServer::psql`].
pub async fn psql(port: u16, password: &str, sql: &str) -> Result<String, String> {
    let program = pg_program("psql")?;
    let port = port.to_string();
    let mut args: Vec<&OsStr> = vec![
        "-X".as_ref(),
        "-A".as_ref(),
        "-t".as_ref(),
        "-v".as_ref(),
        "ON_ERROR_STOP=1".as_ref(),
    ];
    args.extend(superuser_at(&port));
    args.extend::<[&OsStr; 3]>(["-d".as_ref(), DATABASE.as_ref(), "-c".as_ref()]);
    args.push(sql.as_ref());
    let output = run_tool(&program, &args, &[("PGPASSWORD", password)], None).await?;
    Ok(output.trim_end().to_owned())
}

/// This test binary's shared server, started on first use. Tests sharing
/// it must not stop or restart it, and must isolate their data (a table
/// or schema of their own).
pub async fn shared_postgres() -> Result<&'static PgServer, String> {
    static SHARED: OnceCell<Result<&'static PgServer, String>> = OnceCell::const_new();
    SHARED
        .get_or_init(|| async {
            let server = PgServer::start("postgres").await?;
            // Kept for the life of the process, like shared_server does.
            Ok(&*Box::leak(Box::new(server)))
        })
        .await
        .clone()
}

/// The `postgres://` URL of the shared server of this test binary:
/// `DISTLOCK_TEST_PG_URL` if set, else [`shared_postgres`]'s.
pub async fn shared_postgres_url() -> Result<String, String> {
    if let Some(url) = env_override(PG_URL_VAR) {
        return Ok(url);
    }
    Ok(shared_postgres().await?.url())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_startup_message_is_length_prefixed_protocol_3() {
        let message = startup_message("u", "db");
        let body: &[u8] = b"\0\x03\0\0user\0u\0database\0db\0\0";
        assert_eq!(&message[..4], &((body.len() + 4) as u32).to_be_bytes());
        assert_eq!(&message[4..], body);
    }

    #[test]
    fn the_url_names_the_superuser_and_database() {
        assert_eq!(
            pg_url(6000, "secret"),
            "postgres://distlock:secret@127.0.0.1:6000/postgres"
        );
    }
}
