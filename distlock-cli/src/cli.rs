//! The command line, as clap sees it.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Run commands under a distributed lock, inspect locks, and check or
/// benchmark a lock store.
#[derive(Debug, Parser)]
#[command(
    name = "distlock",
    version,
    about,
    after_help = "The store is --url, else $DISTLOCK_URL, else file:// locks in the \
                  user's runtime (or temp) directory.\n\
                  Log verbosity: DISTLOCK_LOG (tracing filter, default `warn`)."
)]
pub struct Cli {
    /// Lock store URL: mem://, file:///dir, redis://, etcd://, zk://, ...
    /// (options such as ?ttl=10s&namespace=app&wait=5s).
    #[arg(long, global = true, value_name = "URL")]
    pub url: Option<String>,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run CMD while holding the lock KEY.
    #[command(long_about = RUN_LONG_ABOUT)]
    Run(RunArgs),
    /// Show who holds the lock KEY.
    Status(StatusArgs),
    /// Run the conformance suite against the store.
    Check(CheckArgs),
    /// Measure lock latency, handoff and throughput against the store, or
    /// (--hold) what holding many locks costs.
    #[command(long_about = BENCH_LONG_ABOUT)]
    Bench(BenchArgs),
}

// The long descriptions sit on the subcommands: set on the argument
// structs, the variants' doc comments would replace them.

/// `distlock run --help`.
const RUN_LONG_ABOUT: &str = "\
Takes the lock KEY, runs CMD while holding it (renewing it in the background), \
releases it when CMD exits, and exits with CMD's code.

CMD gets DISTLOCK_KEY, DISTLOCK_TOKEN (the fencing token), DISTLOCK_OWNER and \
DISTLOCK_NAMESPACE in its environment and inherits stdin/stdout/stderr. SIGINT, \
SIGTERM and SIGHUP sent to distlock are forwarded to CMD; distlock then waits for \
CMD, releases the lock and exits with CMD's code.";

/// `distlock bench --help`.
const BENCH_LONG_ABOUT: &str = "\
Measures, in one run so that ratios hold on a noisy machine: uncontended \
lock+release latency against the store's raw floor (the same round trips without \
distlock), handoff latency from release() to the next waiter's lock(), and \
throughput with --clients clients on --keys keys, with Jain's fairness index over \
the clients. Locks live in a fresh namespace `bench-<random>`.

With --hold N it measures instead what holding locks costs the client: one locker \
takes N distinct locks and, one second after the last is taken (so that work \
following each acquisition once is not counted), holds them for --hold-for while \
distlock reads its own write system calls and bytes written per second (renewals, lease keepalives, \
session heartbeats, runtime wake-ups; from /proc/self/io, Linux only, n/a \
elsewhere) and its resident memory per held lock (RSS before taking the locks and \
at the end of the window, over N). The counters cover every write of the distlock \
process, so --hold runs alone: it skips the other measurements and refuses their \
options. The URL's ttl sets the renewal rate. The kernel counts \
write/writev/pwrite, not send/sendmsg; the Redis, etcd and ZooKeeper clients \
write with the former.";

/// `distlock run`.
#[derive(Debug, Args)]
#[command(after_help = "Exit codes:\n  \
                  CMD's own   CMD's exit code (128+N if CMD died of signal N)\n  \
                  75          the lock was not acquired within --wait\n  \
                  76          the lock was lost while CMD ran (--on-lost kill); also when the loss\n              \
                  is only found at release: CMD's work may have overlapped another holder's\n  \
                  69          the store is unreachable\n  \
                  126, 127    CMD could not be started, was not found\n  \
                  2           bad usage: arguments, key, URL\n  \
                  1           other errors")]
pub struct RunArgs {
    /// The lock to hold.
    pub key: String,

    /// How long to wait for the lock: a duration such as 500ms, 10s, 2m, or
    /// `forever`; 0 makes a single attempt. Default: the URL's `wait`
    /// option, else forever.
    #[arg(long, value_name = "DUR", value_parser = parse_wait)]
    pub wait: Option<Wait>,

    /// What to do if the lock is lost while CMD runs: `kill` sends CMD
    /// SIGTERM, then SIGKILL after --grace, and exits 76; `ignore` warns and
    /// lets CMD finish, exiting with CMD's code.
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = OnLost::Kill)]
    pub on_lost: OnLost,

    /// How long CMD may take to stop after SIGTERM when the lock is lost,
    /// before it gets SIGKILL.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration)]
    pub grace: Duration,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// How long `run` waits for the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// At most this long; zero is one attempt.
    For(Duration),
    /// Until the lock is free.
    Forever,
}

/// What `run` does when the lock is lost while CMD runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnLost {
    /// Stop CMD (SIGTERM, then SIGKILL after the grace period); exit 76.
    Kill,
    /// Warn and let CMD finish; exit with CMD's code.
    Ignore,
}

/// `distlock status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The lock to look at.
    pub key: String,

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
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = parse_positive_duration)]
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
          value_parser = parse_positive_duration, requires = "hold")]
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

const DURATION_EXAMPLES: &str = "examples: 500ms, 10s, 2m";

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|_| format!("`{text}` is not a duration ({DURATION_EXAMPLES})"))
}

fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        d if d.is_zero() => Err("must be greater than zero".to_owned()),
        d => Ok(d),
    }
}

fn parse_wait(text: &str) -> Result<Wait, String> {
    if text == "forever" {
        return Ok(Wait::Forever);
    }
    if text == "0" {
        return Ok(Wait::For(Duration::ZERO));
    }
    humantime::parse_duration(text)
        .map(Wait::For)
        .map_err(|_| format!("`{text}` is not a duration ({DURATION_EXAMPLES}, 0, forever)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn wait_accepts_durations_zero_and_forever() {
        assert_eq!(parse_wait("0"), Ok(Wait::For(Duration::ZERO)));
        assert_eq!(parse_wait("2s"), Ok(Wait::For(Duration::from_secs(2))));
        assert_eq!(parse_wait("forever"), Ok(Wait::Forever));
        assert!(parse_wait("soon").is_err());
    }

    #[test]
    fn long_descriptions_reach_the_help() {
        let command = Cli::command();
        let long_about = |name: &str| {
            command
                .find_subcommand(name)
                .and_then(|sub| sub.get_long_about())
                .map(ToString::to_string)
                .unwrap_or_default()
        };
        assert!(long_about("run").contains("DISTLOCK_TOKEN"));
        let bench = long_about("bench");
        assert!(
            bench.contains("every write of the distlock process"),
            "{bench}"
        );
        assert!(bench.contains("--hold runs alone"), "{bench}");
    }

    #[test]
    fn hold_runs_alone_and_hold_for_needs_it() {
        let parsed =
            Cli::try_parse_from(["distlock", "bench", "--hold", "5", "--hold-for", "1s"]).unwrap();
        let Command::Bench(bench) = parsed.command else {
            panic!("not bench")
        };
        assert_eq!(bench.hold, Some(5));
        assert_eq!(bench.hold_for, Duration::from_secs(1));
        let defaulted = Cli::try_parse_from(["distlock", "bench", "--hold", "5"]).unwrap();
        let Command::Bench(bench) = defaulted.command else {
            panic!("not bench")
        };
        assert_eq!(bench.hold_for, Duration::from_secs(10));
        let plain = Cli::try_parse_from(["distlock", "bench"]).unwrap();
        let Command::Bench(bench) = plain.command else {
            panic!("not bench")
        };
        assert_eq!(bench.hold, None);
        for args in [
            &["distlock", "bench", "--hold", "5", "--clients", "2"][..],
            &["distlock", "bench", "--hold", "5", "--duration", "1s"],
            &["distlock", "bench", "--hold", "0"],
            &["distlock", "bench", "--hold-for", "1s"],
            &["distlock", "bench", "--hold", "5", "--hold-for", "0s"],
        ] {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?} accepted");
        }
    }

    #[test]
    fn run_requires_the_double_dash() {
        let parsed = Cli::try_parse_from(["distlock", "run", "k", "echo", "hi"]);
        assert!(parsed.is_err());
        let parsed = Cli::try_parse_from(["distlock", "run", "k", "--", "echo", "--wait"]).unwrap();
        let Command::Run(run) = parsed.command else {
            panic!("not run")
        };
        assert_eq!(run.command, ["echo", "--wait"]);
        assert_eq!(run.wait, None);
        assert_eq!(run.on_lost, OnLost::Kill);
    }
}
