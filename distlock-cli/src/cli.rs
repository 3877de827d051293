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
    after_help = "The store is --url, else $DISTLOCK_URL, else file:// locks in \
                  /var/lib/distlock, created and shared by every user of the host, kept \
                  across reboots so fencing tokens keep rising; where it cannot be created \
                  or used, in <temp dir>/distlock (also shared, but emptied at boot on many \
                  systems, and tokens then start again). `status` and --verbose say which.\n\
                  Log verbosity: DISTLOCK_LOG (a tracing filter; default `warn`, with the \
                  ZooKeeper client's reconnection warnings and lock-core's lost-lock warning \
                  kept to `error`: DISTLOCK_LOG=warn shows them)."
)]
pub struct Cli {
    /// Lock store URL: mem://, file:///dir, redis://, etcd://, zk://, ...
    /// (options such as ?ttl=10s&namespace=app&wait=5s).
    #[arg(long, global = true, value_name = "URL")]
    pub url: Option<String>,

    /// Write the lock metrics of this run to PATH when it ends, in
    /// Prometheus's text format (for node_exporter's textfile collector),
    /// replacing the file at once.
    #[arg(long, global = true, value_name = "PATH")]
    pub metrics_file: Option<std::path::PathBuf>,

    /// Say on stderr which store is used and where its URL came from
    /// (--url, DISTLOCK_URL, or the default directory).
    #[arg(long, short = 'v', global = true)]
    pub verbose: bool,

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
    /// Run CMD only while leading the election NAME.
    #[command(long_about = ELECT_LONG_ABOUT)]
    Elect(ElectArgs),
    /// Show who leads the election NAME, once or (--watch) as it changes.
    #[command(long_about = LEADER_LONG_ABOUT)]
    Leader(LeaderArgs),
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
DISTLOCK_NAMESPACE in its environment and inherits stdin/stdout/stderr.

CMD and every process it starts are one job, and the lock is released only when \
all of it is gone. CMD runs in a process group of its own (in the foreground of \
distlock's terminal, if distlock has one: Ctrl-C and Ctrl-Z reach CMD's processes). \
On Linux distlock is the child subreaper of the job, so processes that leave CMD's \
group (setsid, double-forking daemons) still belong to it. SIGINT, SIGTERM and \
SIGHUP sent to distlock are passed to the whole job, and a lost lock (--on-lost \
kill) sends it SIGTERM; whatever is left after --grace gets SIGKILL. If CMD exits \
leaving processes running, the lock is kept until they end (if a signal killed \
CMD, they are stopped). If distlock itself is SIGKILLed, the kernel kills CMD \
(Linux, --on-lost kill) but not what CMD started.";

/// `distlock elect --help`.
const ELECT_LONG_ABOUT: &str = "\
Campaigns in the election NAME with --value, waits its turn (candidates are served \
in the store's queue order), runs CMD while leader, resigns when CMD exits, and \
exits with CMD's code. An election is the lock NAME: its holder is the leader, its \
fencing token the leader's term, its value the leader's value.

CMD gets the variables `run` sets (DISTLOCK_KEY is NAME, DISTLOCK_TOKEN the term) \
plus DISTLOCK_TERM, and inherits stdin/stdout/stderr. Signals are passed on as by \
`run`, and CMD with everything it starts is one job as for `run`: the leadership is \
given up only when all of it is gone. A leadership lost while CMD ran ends in exit \
code 76 whatever --on-lost says: `kill` stops the job at once, `ignore` lets it \
finish.";

/// `distlock leader --help`.
const LEADER_LONG_ABOUT: &str = "\
Prints who leads the election NAME: `NAME: led by OWNER, term T, value \"V\"` or \
`NAME: no leader` (the value is quoted, with escapes, so that it stays on one \
line). Exits 0 either way.

With --watch it prints the current state, then one line per change of leader or \
of its value, pushed by the store, until SIGINT, SIGTERM or SIGHUP (exit 0). With \
--json each line is one object with exactly the fields name, value, term and owner \
(value, term and owner are null when nobody leads).";

/// `distlock bench --help`.
const BENCH_LONG_ABOUT: &str = "\
Measures, in one run so that ratios hold on a noisy machine: uncontended \
lock+release latency against the store's raw floor (the same round trips without \
distlock), handoff latency from release() to the next waiter's lock(), and \
throughput with --clients clients on --keys keys, with Jain's fairness index over \
the clients. Locks live in a fresh namespace `bench-<random>`.

Leader election rows: failover after resign (resign() called -> the waiting \
candidate's campaign() returns) against two raw round trips (the store's raw \
lock+release); failover after a leader crash (ttl 1 s: a leaked lease on stores \
with per-lock leases, elsewhere a child `distlock elect` killed with SIGKILL); \
and observe latency (a change committed -> each of 16 observers \
notified, the slowest and each one) against one raw round trip.

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

/// The exit codes of `run` and `elect`.
const RUN_EXIT_CODES: &str = "Exit codes:\n  \
                  CMD's own   CMD's exit code (128+N if CMD died of signal N)\n  \
                  75          not acquired (run) or not elected (elect) within --wait\n  \
                  76          the lock or leadership was lost while CMD ran (run: with --on-lost\n              \
                  kill; elect: always); also when the loss is only found at release:\n              \
                  CMD's work may have overlapped another holder's\n  \
                  69          the store is unavailable (refused, no answer, down)\n  \
                  77          permission denied: credentials or ACL refused, lock directory\n              \
                  not writable\n  \
                  126, 127    CMD could not be started, was not found\n  \
                  128+N       distlock got signal N while waiting\n  \
                  2           bad usage: arguments, key, value, URL; the URL points at another\n              \
                  kind of server, or its TLS settings cannot work\n  \
                  1           other errors";

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

/// How long `run` and `elect` wait for the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// At most this long; zero is one attempt.
    For(Duration),
    /// Until the lock is free.
    Forever,
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

    /// Keep printing: the current state, then one line per change, until
    /// interrupted.
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

/// Parses the command line. A duration option followed directly by `--`
/// is missing its value (clap would take `--` as the value, since
/// durations may start with `-` so that `-1s` is refused as negative
/// rather than read as a flag).
pub fn parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    use clap::CommandFactory;
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let flags = ["--wait", "--grace", "--duration", "--hold-for"];
    for pair in args.windows(2) {
        if pair[1] == "--" && flags.iter().any(|flag| pair[0] == *flag) {
            let flag = pair[0].to_string_lossy();
            return Err(Cli::command().error(
                clap::error::ErrorKind::InvalidValue,
                format!("a value is required for '{flag} <DUR>' but none was supplied"),
            ));
        }
    }
    Cli::try_parse_from(args)
}

const DURATION_EXAMPLES: &str = "examples: 5 (seconds), 500ms, 10s, 2m";

/// A duration: a number of seconds (`5`, `0.5`, as `flock -w` and
/// `timeout` take them) or a humantime duration (`500ms`, `2m`).
fn parse_duration(text: &str) -> Result<Duration, String> {
    if text.starts_with('-') {
        return Err(format!("`{text}` is negative; a duration is 0 or more"));
    }
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds)
            .map_err(|_| format!("`{text}` is not a duration ({DURATION_EXAMPLES})"));
    }
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
    parse_duration(text)
        .map(Wait::For)
        .map_err(|reason| format!("{reason}, or `forever`"))
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
    fn bare_numbers_are_seconds_and_negatives_are_refused() {
        assert_eq!(parse_wait("5"), Ok(Wait::For(Duration::from_secs(5))));
        assert_eq!(parse_duration("0.25"), Ok(Duration::from_millis(250)));
        for text in ["-1s", "-5", "NaN", "inf", "1e400"] {
            assert!(parse_duration(text).is_err(), "{text} accepted");
        }
        let error = parse_wait("-1s").unwrap_err();
        assert!(error.contains("negative"), "{error}");
        let parsed = Cli::try_parse_from(["distlock", "run", "k", "--wait", "-1s", "--", "x"]);
        let error = parsed.unwrap_err().to_string();
        assert!(error.contains("`-1s` is negative"), "{error}");
        let error = parse(["distlock", "run", "k", "--wait", "--", "x"]).unwrap_err();
        assert!(error.to_string().contains("'--wait <DUR>'"), "{error}");
        assert!(parse(["distlock", "run", "k", "--wait", "2", "--", "x"]).is_ok());
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
        assert!(long_about("elect").contains("DISTLOCK_TERM"));
        assert!(long_about("leader").contains("name, value, term and owner"));
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
        assert_eq!(run.cmd.command, ["echo", "--wait"]);
        assert_eq!(run.cmd.wait, None);
        assert_eq!(run.on_lost, OnLost::Kill);
        assert_eq!(run.value, None);
    }

    #[test]
    fn elect_takes_runs_options_and_a_value() {
        assert!(Cli::try_parse_from(["distlock", "elect", "e", "echo"]).is_err());
        let parsed = Cli::try_parse_from(["distlock", "elect", "e", "--", "true"]).unwrap();
        let Command::Elect(elect) = parsed.command else {
            panic!("not elect")
        };
        assert_eq!((elect.name.as_str(), elect.value), ("e", None));
        assert_eq!(elect.on_lost, OnLost::Kill);
        assert_eq!(elect.cmd.wait, None);
        let args = ["distlock", "elect", "e", "--value", "v", "--wait", "2s"];
        let parsed = Cli::try_parse_from(args.iter().chain(&["--on-lost", "ignore", "--", "x"]));
        let Command::Elect(elect) = parsed.unwrap().command else {
            panic!("not elect")
        };
        assert_eq!(elect.value.as_deref(), Some("v"));
        assert_eq!(elect.on_lost, OnLost::Ignore);
        assert_eq!(elect.cmd.wait, Some(Wait::For(Duration::from_secs(2))));
        assert_eq!(elect.cmd.command, ["x"]);
    }

    #[test]
    fn leader_flags() {
        let parsed = Cli::try_parse_from(["distlock", "leader", "e", "--watch", "--json"]);
        let Command::Leader(leader) = parsed.unwrap().command else {
            panic!("not leader")
        };
        assert!(leader.watch && leader.json);
        assert!(Cli::try_parse_from(["distlock", "leader"]).is_err());
    }
}
