//! The command line, as clap sees it: the commands and their global
//! options here, each subcommand's arguments in `args`, the long help
//! texts in `help`, and how durations are read in `durations`.

mod args;
mod durations;
mod help;

use std::ffi::OsString;

use clap::{Parser, Subcommand};

pub use args::{BenchArgs, CheckArgs, CmdArgs, ElectArgs, LeaderArgs, OnLost, RunArgs, StatusArgs};
pub use durations::Wait;
use help::{
    BENCH_LONG_ABOUT, ELECT_LONG_ABOUT, LEADER_LONG_ABOUT, RUN_LONG_ABOUT, SCHEMA_LONG_ABOUT,
};

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
                  Redis and ZooKeeper clients' reconnection warnings and lock-core's lost-lock \
                  warning kept to `error`: DISTLOCK_LOG=warn shows them)."
)]
pub struct Cli {
    /// Lock store URL: mem://, file:///dir, redis://, etcd://, zk://,
    /// postgres://, ...
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
    /// Print the SQL that creates the PostgreSQL store's tables in the
    /// URL's schema, for running it with create_schema=false.
    #[command(long_about = SCHEMA_LONG_ABOUT)]
    Schema,
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

#[cfg(test)]
mod tests {
    use super::durations::{parse_duration, parse_wait};
    use super::*;
    use clap::CommandFactory;
    use std::time::Duration;

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
        assert!(long_about("schema").contains("create_schema=false"));
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
