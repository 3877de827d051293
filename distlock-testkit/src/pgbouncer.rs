//! PgBouncer in transaction mode in front of a test PostgreSQL server, as
//! deployments that pool connections run it.
//!
//! Like PostgreSQL, PgBouncer refuses to run as root; it then runs as
//! [`UNPRIVILEGED_USER`](crate::unprivileged::UNPRIVILEGED_USER).

use std::fmt;
use std::path::{Path, PathBuf};

use tokio::sync::OnceCell;

use crate::postgres::{pg_url, scram_probe, shared_postgres, PgServer, SUPERUSER};
use crate::unprivileged::unprivileged_user;
use crate::unprivileged::RunAs;
use crate::{find_program, Server, ServerContext, ServerSpec};

/// The configuration file in the bouncer's data dir.
const CONFIG_FILE: &str = "pgbouncer.ini";
/// The password file (`auth_file`) in the bouncer's data dir.
const AUTH_FILE: &str = "userlist.txt";

/// A `pgbouncer` process in transaction pooling mode in front of a
/// [`PgServer`], on a free 127.0.0.1 port. Clients log in as the server's
/// superuser with the server's password (checked by PgBouncer with
/// SCRAM-SHA-256 against its `auth_file`, which PgBouncer also uses to
/// log in to the server); every database name is passed through.
pub struct PgBouncer {
    server: Server,
    password: String,
}

impl fmt::Debug for PgBouncer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The password is left out.
        f.debug_struct("PgBouncer")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl PgBouncer {
    /// Starts a bouncer in front of `backend` and waits until it answers
    /// a startup message with a password request.
    pub async fn start(backend: &PgServer) -> Result<Self, String> {
        let program = find_program(
            &["pgbouncer", "/usr/sbin/pgbouncer"],
            "run scripts/test.sh (it installs Debian's pgbouncer)",
        )?;
        let password = backend.password().to_owned();
        let (backend_port, user) = (backend.server().port(), unprivileged_user()?);
        let config_password = password.clone();
        let mut spec = ServerSpec::new("pgbouncer", program)
            .args(|ctx| [ctx.data_dir.join(CONFIG_FILE)])
            .init(move |ctx| {
                let written = write_config(ctx, backend_port, &config_password, user);
                Box::pin(async move { written })
            });
        if let Some(user) = user {
            spec = spec.run_as(user);
        }
        let server = scram_probe(spec).start().await?;
        Ok(Self { server, password })
    }

    /// `postgres://distlock:<password>@127.0.0.1:<port>/postgres`, the
    /// URL of the bouncer.
    pub fn url(&self) -> String {
        pg_url(self.server.port(), &self.password)
    }

    /// The URL of PgBouncer's admin console (database `pgbouncer`, which
    /// answers `SHOW CONFIG`, `SHOW POOLS`, ... in the simple query
    /// protocol only).
    pub fn admin_url(&self) -> String {
        let url = self.url();
        let base = url.rsplit_once('/').map_or(url.as_str(), |(base, _)| base);
        format!("{base}/pgbouncer")
    }

    /// The supervised `pgbouncer` process.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// The process, for a caller that keeps it running as a plain server.
    pub fn into_server(self) -> Server {
        self.server
    }

    /// The configuration file the bouncer runs with.
    pub fn config_path(&self) -> PathBuf {
        self.server.data_dir().join(CONFIG_FILE)
    }
}

/// Writes `pgbouncer.ini` and the password file for a bouncer in front of
/// the server on `backend_port`. Every setting not named here is
/// PgBouncer's default (pool sizes, `max_client_conn`, timeouts): the
/// pooling mode is transaction, the address and socket dir are the test
/// server's, and the superuser may use the admin console.
fn write_config(
    ctx: &ServerContext,
    backend_port: u16,
    password: &str,
    user: Option<RunAs>,
) -> Result<(), String> {
    let dir = &ctx.data_dir;
    let auth_file = dir.join(AUTH_FILE);
    let config = format!(
        "[databases]\n* = host=127.0.0.1 port={backend_port}\n\n\
         [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
         unix_socket_dir = {socket_dir}\npool_mode = transaction\n\
         auth_type = scram-sha-256\nauth_file = {auth}\nadmin_users = {SUPERUSER}\n",
        port = ctx.port,
        socket_dir = dir.display(),
        auth = auth_file.display(),
    );
    write_private(&dir.join(CONFIG_FILE), &config, user)?;
    write_private(
        &auth_file,
        &format!("\"{SUPERUSER}\" \"{password}\"\n"),
        user,
    )
}

/// Writes `text` to `path`, readable by its owner only, owned by `user`.
fn write_private(path: &Path, text: &str, user: Option<RunAs>) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |e: std::io::Error| format!("write {}: {e}", path.display());
    std::fs::write(path, text).map_err(fail)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(fail)?;
    if let Some(user) = user {
        std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid)).map_err(fail)?;
    }
    Ok(())
}

/// This test binary's shared bouncer, in front of [`shared_postgres`]
/// (always a spawned server, whatever `DISTLOCK_TEST_PG_URL` says),
/// started on first use.
pub async fn shared_pgbouncer() -> Result<&'static PgBouncer, String> {
    static SHARED: OnceCell<Result<&'static PgBouncer, String>> = OnceCell::const_new();
    SHARED
        .get_or_init(|| async {
            let bouncer = PgBouncer::start(shared_postgres().await?).await?;
            // Kept for the life of the process, like shared_server does.
            Ok(&*Box::leak(Box::new(bouncer)))
        })
        .await
        .clone()
}
