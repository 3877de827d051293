//! The arguments of each subcommand.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::durations::{parse_duration, parse_positive_duration, parse_wait, Wait};
use super::help::RUN_EXIT_CODES;

/// `distlock run`.
#[derive(Debug, Args)]
#[command(after_help = RUN_EXIT_CODES)]
pub struct RunArgs {
    /// The lock to hold.
    pub key: String,

    /// A value stored with the lock while CMD runs (an address, a note for
    /// operators), shown by `status`; UTF-8, at most 4096 bytes.
    #[arg(long, value_name = "V")]
    pub value: Option<String>,

    /// What to do if the lock is lost while CMD runs: `kill` sends CMD and
    /// every process it started SIGTERM, then SIGKILL after --grace, and
    /// exits 76; `ignore` warns and lets CMD finish, exiting with CMD's
    /// code.
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = OnLost::Kill)]
    pub on_lost: OnLost,

    /// Take a read lock of KEY, shared with other --shared runs and
    /// excluding plain ones (like `flock -s`); a plain run waiting for the
    /// lock is not overtaken by --shared runs that come after it.
    #[arg(long, conflicts_with = "permits")]
    pub shared: bool,

    /// Take one of N permits of the semaphore KEY (1 to 1024): at most N
    /// such runs at once. Every run of KEY must give the same N while
    /// permits are held. The semaphore is not the lock KEY: plain runs of
    /// KEY do not wait for it.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(distlock::MAX_SEMAPHORE_LIMIT)))]
    pub permits: Option<u32>,

    /// --wait, --grace and CMD.
    #[command(flatten)]
    pub cmd: CmdArgs,
}

/// `distlock elect`.
#[derive(Debug, Args)]
#[command(after_help = RUN_EXIT_CODES)]
pub struct ElectArgs {
    /// The election to campaign in (a lock key).
    pub name: String,

    /// The value to lead with, shown by `leader` and `status` (an address,
    /// say); UTF-8, at most 4096 bytes. Default: empty (the owner id already
    /// names the host and pid).
    #[arg(long, value_name = "V")]
    pub value: Option<String>,

    /// What to do if the leadership is lost while CMD runs: `kill` sends
    /// CMD and every process it started SIGTERM, then SIGKILL after
    /// --grace; `ignore` warns and lets CMD finish. Either way distlock
    /// then exits 76.
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = OnLost::Kill)]
    pub on_lost: OnLost,

    /// --wait, --grace and CMD.
    #[command(flatten)]
    pub cmd: CmdArgs,
}

/// What `run` and `elect` share: the wait, the grace period and CMD.
#[derive(Debug, Args)]
pub struct CmdArgs {
    /// How long to wait for the lock (elect: to become leader): a duration
    /// such as 500ms, 10s, 2m, or `forever`; 0 makes a single attempt.
    /// Default: the URL's `wait` option, else forever.
    #[arg(long, value_name = "DUR", value_parser = parse_wait, allow_hyphen_values = true)]
    pub wait: Option<Wait>,

    /// How long CMD and the processes it started may take to stop after
    /// SIGTERM (the lock, or elect's leadership, was lost) or after a
    /// signal distlock passed on to them, before what is left gets SIGKILL.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration,
          allow_hyphen_values = true)]
    pub grace: Duration,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// What `run` and `elect` do when the lock is lost while CMD runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnLost {
    /// Stop CMD (SIGTERM, then SIGKILL after the grace period); exit 76.
    Kill,
    /// Warn and let CMD finish; `run` exits with CMD's code, `elect` 76.
    Ignore,
}

/// `distlock leader`.
#[derive(Debug, Args)]
pub struct LeaderArgs {
    /// The election to look at.
    pub name: String,

    /// Keep printing: the current state, then one line per change (quick
    /// changes may be merged on some stores), until interrupted.
    #[arg(long)]
    pub watch: bool,

    /// Print JSON objects (one per line) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `distlock status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The lock to look at.
    pub key: String,

    /// Show the holders of the semaphore KEY's permits instead of the
    /// lock KEY's holder or readers.
    #[arg(long)]
    pub permits: bool,

    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `distlock check`.
#[derive(Debug, Args)]
#[command(after_help = "Exit code: 0 if no case failed, 1 otherwise.")]
pub struct CheckArgs {
    /// Run only the cases whose name contains this text.
    #[arg(long, value_name = "SUBSTR")]
    pub filter: Option<String>,
}

/// `distlock bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Concurrent clients in the throughput test.
    #[arg(long, value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub clients: u32,

    /// Keys the clients spread over (each operation picks one at random).
    #[arg(long, value_name = "K", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub keys: u32,

    /// Length of the throughput test; the latency and handoff tests take
    /// up to a third of it each.
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = parse_positive_duration,
          allow_hyphen_values = true)]
    pub duration: Duration,

    /// All clients share one locker (one connection) instead of each
    /// opening its own.
    #[arg(long)]
    pub shared: bool,

    /// Measure only what holding N distinct locks costs the client
    /// process: write syscalls/s, bytes written/s, RSS per held lock
    /// (runs alone; see `bench --help`).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000),
          conflicts_with_all = ["clients", "keys", "duration", "shared"])]
    pub hold: Option<u32>,

    /// How long --hold holds the locks while measuring.
    #[arg(long, value_name = "DUR", default_value = "10s",
          value_parser = parse_positive_duration, requires = "hold", allow_hyphen_values = true)]
    pub hold_for: Duration,

    /// Runtime threads of the bench process: 1 runs every client on one
    /// thread (a current-thread runtime: no hand-offs between threads);
    /// N > 1 uses N worker threads. Default: one worker per core.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,

    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}
