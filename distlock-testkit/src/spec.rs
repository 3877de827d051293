//! How to launch a server: [`ServerSpec`] and the [`ServerContext`] its
//! argument builder and readiness probe see. Launching is the server's
//! job: [`ServerSpec::start`] is defined with [`Server`](crate::Server),
//! which this module does not know.

use std::ffi::OsString;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::probe::{self, ProbeFuture};
use crate::unprivileged::RunAs;

/// Default time a server gets to answer its readiness probe. Generous
/// because JVMs (ZooKeeper) start slowly on a busy 2-core machine.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Where one launch of a server lives: its ports and data dir. The same
/// context is used again by [`Server::restart`](crate::Server::restart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerContext {
    /// The main client port (`ports[0]`).
    pub port: u16,
    /// All ports reserved for the server: the main port first, then the
    /// extra ones asked for with [`ServerSpec::extra_ports`] (peer ports,
    /// admin ports, ...). All are free 127.0.0.1 ports.
    pub ports: Vec<u16>,
    /// An empty dir for the server's data, removed with the server.
    pub data_dir: PathBuf,
}

impl ServerContext {
    /// `127.0.0.1:port`, the address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The data dir.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }
}

/// Builds the command-line arguments from the context.
type ArgsFn = Arc<dyn Fn(&ServerContext) -> Vec<OsString> + Send + Sync>;
/// Checks readiness; see [`ServerSpec::probe`].
type ProbeFn = Arc<dyn Fn(&ServerContext) -> ProbeFuture + Send + Sync>;
/// Prepares the data dir once; see [`ServerSpec::init`].
type InitFn = Arc<dyn Fn(&ServerContext) -> InitFuture + Send + Sync>;

/// The future an init step returns (see [`ServerSpec::init`]): `Ok` once
/// the data dir is ready for the first launch, `Err` with the reason the
/// server cannot start.
pub type InitFuture = ProbeFuture;

/// How to launch a test server; start it with [`ServerSpec::start`].
///
/// ```no_run
/// # async fn demo() -> Result<(), String> {
/// use distlock_testkit::{find_program, ServerSpec};
/// let redis = find_program(&["redis-server"], "install redis-server")?;
/// let server = ServerSpec::new("redis", redis)
///     .args(|ctx| {
///         let port = ctx.port.to_string();
///         vec!["--port".into(), port, "--dir".into(), ctx.data_dir.display().to_string()]
///     })
///     .start()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ServerSpec {
    pub(crate) name: String,
    pub(crate) program: PathBuf,
    pub(crate) args: ArgsFn,
    pub(crate) port_count: usize,
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) probe: ProbeFn,
    pub(crate) ready_timeout: Duration,
    pub(crate) init: Option<InitFn>,
    pub(crate) run_as: Option<RunAs>,
}

impl ServerSpec {
    /// A server called `name` (used in errors and temp dir names) run from
    /// `program`, with no arguments, one port, the TCP-connect probe and
    /// [`DEFAULT_READY_TIMEOUT`].
    pub fn new(name: impl Into<String>, program: impl Into<PathBuf>) -> Self {
        Self {
            name: name.into(),
            program: program.into(),
            args: Arc::new(|_| Vec::new()),
            port_count: 1,
            env: Vec::new(),
            probe: Arc::new(|ctx| Box::pin(probe::tcp_connect(ctx.addr()))),
            ready_timeout: DEFAULT_READY_TIMEOUT,
            init: None,
            run_as: None,
        }
    }

    /// Sets how the arguments are built from the ports and data dir. Called
    /// again (with the same context) on restart.
    pub fn args<F, I, S>(mut self, build: F) -> Self
    where
        F: Fn(&ServerContext) -> I + Send + Sync + 'static,
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args = Arc::new(move |ctx| build(ctx).into_iter().map(Into::into).collect());
        self
    }

    /// Reserves `n` more free ports besides the main one, e.g. for peer
    /// ports of an etcd or ZooKeeper member; see [`ServerContext::ports`].
    pub fn extra_ports(mut self, n: usize) -> Self {
        self.port_count = 1 + n;
        self
    }

    /// Sets an environment variable for the server.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Replaces the readiness probe (default: a TCP connection to the main
    /// port succeeds). The probe is retried until it returns `Ok` or the
    /// readiness timeout passes; each try is also cut off after a few
    /// seconds. See [`crate::probe`] for ready-made probes.
    pub fn probe<F>(mut self, probe: F) -> Self
    where
        F: Fn(&ServerContext) -> ProbeFuture + Send + Sync + 'static,
    {
        self.probe = Arc::new(probe);
        self
    }

    /// Sets how long the server gets to become ready, on start and on each
    /// restart.
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// Sets a step run once per start, after the ports and data dir are
    /// reserved and before the first launch (not again on restart), such
    /// as creating a database cluster in the data dir. If it fails, the
    /// server does not start and [`ServerSpec::start`] returns its error.
    pub fn init<F>(mut self, init: F) -> Self
    where
        F: Fn(&ServerContext) -> InitFuture + Send + Sync + 'static,
    {
        self.init = Some(Arc::new(init));
        self
    }

    /// Runs the server as another user (only root may), for servers that
    /// refuse to run as root (PostgreSQL, PgBouncer). The temp dir and the
    /// data dir are given to that user before the init step; the parent-
    /// death signal still applies (it is set after the user changes).
    pub fn run_as(mut self, user: RunAs) -> Self {
        self.run_as = Some(user);
        self
    }

    /// The user the server runs as, if not the current one.
    pub fn user(&self) -> Option<RunAs> {
        self.run_as
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The program run.
    pub fn program(&self) -> &Path {
        &self.program
    }
}

impl fmt::Debug for ServerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerSpec")
            .field("name", &self.name)
            .field("program", &self.program)
            .field("port_count", &self.port_count)
            .field("env", &self.env)
            .field("ready_timeout", &self.ready_timeout)
            .field("run_as", &self.run_as)
            .finish_non_exhaustive()
    }
}
