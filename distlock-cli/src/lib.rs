//! The `distlock` command: run a command under a distributed lock or only
//! while leading an election, see who holds a lock or leads, and check or
//! benchmark a lock store.
//!
//! ```text
//! distlock [--url URL] run KEY [--value V] [--wait DUR] [--on-lost kill|ignore] [--grace DUR] -- CMD [ARGS...]
//! distlock [--url URL] elect NAME [--value V] [--wait DUR] [--on-lost kill|ignore] [--grace DUR] -- CMD [ARGS...]
//! distlock [--url URL] leader NAME [--watch] [--json]
//! distlock [--url URL] status KEY [--json]
//! distlock [--url URL] check [--filter SUBSTR]
//! distlock [--url URL] bench [--clients N] [--keys K] [--duration DUR] [--shared] [--json]
//! distlock [--url URL] bench --hold N [--hold-for DUR] [--json]
//! distlock [--url URL] schema   (PostgreSQL: the SQL of the store's tables for the URL's schema)
//! distlock [--metrics-file PATH] ...   (any command: its lock metrics, written when it ends)
//! ```
//!
//! The store is `--url`, else `$DISTLOCK_URL`, else `file://` locks in
//! [`file::default_dir`](distlock::file::default_dir). Every
//! message on stderr is one line starting with `distlock: `, never shows
//! the URL's password, and never a panic. Exit codes are listed in
//! [`exit`].
//!
//! This library is the command's implementation; `main` only parses the
//! arguments and calls [`execute`].

mod bench;
mod check;
pub mod cli;
mod elect;
pub mod exit;
mod job;
mod leader;
mod metrics_out;
mod output;
mod run;
mod schema;
mod signals;
mod status;
mod supervise;
mod url;

use std::panic;
use std::sync::atomic::Ordering;

use cli::{Cli, Command};
use exit::Failure;
use url::ChosenStore;

/// Runs the parsed command line; returns the process exit code. Errors
/// are reported on stderr here.
pub async fn execute(cli: Cli) -> i32 {
    let store = match ChosenStore::resolve(cli.url) {
        Ok(store) => store,
        Err(failure) => return report(None, failure),
    };
    if cli.verbose {
        output::say(&format!("store {}", store.described()));
    }
    if let Some(path) = &cli.metrics_file {
        if let Err(problem) = metrics_out::check_writable(path) {
            return report(None, Failure::usage(problem));
        }
    }
    let bench_json = matches!(&cli.command, Command::Bench(args) if args.json);
    if cli.metrics_file.is_some() || bench_json {
        metrics_out::install();
    }
    let code = run_command(&store, cli.command).await;
    if let Some(path) = &cli.metrics_file {
        if let Err(error) = metrics_out::write_file(path) {
            output::say(&format!(
                "cannot write the metrics to {}: {error}",
                path.display()
            ));
        }
    }
    code
}

async fn run_command(store: &ChosenStore, command: Command) -> i32 {
    let result = match command {
        Command::Run(args) => run::run(store, args).await,
        Command::Elect(args) => elect::elect(store, args).await,
        Command::Leader(args) => leader::leader(store, args).await,
        Command::Status(args) => status::status(store, args).await,
        Command::Check(args) => check::check(store, args).await,
        Command::Bench(args) => bench::bench(store, args).await,
        Command::Schema => schema::schema(store),
    };
    result.unwrap_or_else(|failure| report(Some(store), failure))
}

fn report(store: Option<&ChosenStore>, failure: Failure) -> i32 {
    if !failure.message.is_empty() {
        let message = match store {
            Some(store) => store.scrub(&failure.message),
            None => failure.message,
        };
        output::say(&message);
    }
    failure.code
}

/// Reports a command line clap rejected, as one line: clap's reason, its
/// tip if it has one, and the usage. Help and version requests are printed
/// as clap prints them. Returns the exit code (2, or 0 for help/version).
pub fn report_usage_error(error: clap::Error) -> i32 {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = error.print();
        return error.exit_code();
    }
    output::say(&usage_line(&error.render().to_string(), error.kind()));
    exit::USAGE
}

/// clap's rendered error as one line: the reason with what clap lists
/// under it (the missing arguments, the possible values), its tip, and
/// the usage.
fn usage_line(rendered: &str, kind: clap::error::ErrorKind) -> String {
    use clap::error::ErrorKind;
    let mut parts: Vec<String> = Vec::new();
    for line in rendered.lines().filter(|l| !l.trim().is_empty()) {
        let indented = line.starts_with(' ');
        let line = line.trim();
        if let Some(reason) = line.strip_prefix("error: ") {
            parts.push(reason.trim_end_matches(':').to_owned());
        } else if let Some(values) = line.strip_prefix("[possible values: ") {
            parts.push(format!("possible values: {}", values.trim_end_matches(']')));
        } else if line.starts_with("tip:") {
            parts.push(line.to_owned());
        } else if let Some(usage) = line.strip_prefix("Usage: ") {
            // `run KEY echo hi` is the classic slip: say what is missing.
            if kind == ErrorKind::UnknownArgument && usage.contains(" -- <CMD>") {
                parts.push("the command must come after `--`".to_owned());
            }
            parts.push(format!("usage: {usage}"));
        } else if indented {
            // What a reason lists (missing arguments), one per line.
            if let Some(reason) = parts.last_mut() {
                reason.push_str(if reason.ends_with("provided") {
                    ": "
                } else {
                    ", "
                });
                reason.push_str(line);
            }
        }
    }
    parts.join("; ")
}

/// The async runtime `command` runs on.
///
/// `run`, `elect`, `leader`, `status` and `schema` get a current-thread runtime:
/// holding one lock and watching one child, or watching one lock, needs no
/// more, and a store's reply then wakes no other thread. `bench` takes `--threads` (1: current thread; default:
/// one worker per core, like most services). `check` uses one worker per
/// core, as the conformance tests do.
pub fn runtime_for(command: &cli::Command) -> std::io::Result<tokio::runtime::Runtime> {
    let threads = match command {
        cli::Command::Run(_)
        | cli::Command::Elect(_)
        | cli::Command::Leader(_)
        | cli::Command::Status(_)
        | cli::Command::Schema => Some(1),
        cli::Command::Bench(args) => args.threads.map(usize::from),
        cli::Command::Check(_) => None,
    };
    match threads {
        Some(1) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Some(workers) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build(),
        None => tokio::runtime::Runtime::new(),
    }
}

/// Sends `tracing` output to stderr, filtered by `DISTLOCK_LOG` (default
/// `warn`), and makes panics print one `distlock: internal error` line
/// instead of a backtrace hint.
///
/// The default filter also mutes lock-core's own "lock lost" warning:
/// `run` reports a loss itself, in its one-line format, and saying it twice
/// would only confuse. It keeps only errors of the Redis and ZooKeeper
/// client libraries, whose warnings are about their own reconnection
/// attempts (a node or server they could not reach, a session that
/// expired): the store reports what they cost (a lost lock, one
/// `Unavailable` line) itself. `DISTLOCK_LOG=warn` brings them back.
pub fn init_diagnostics() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("DISTLOCK_LOG").unwrap_or_else(|_| {
        EnvFilter::new("warn,lock_core::loss=error,redis=error,zookeeper_client=error")
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .without_time()
        .with_target(false)
        .try_init();
    panic::set_hook(Box::new(|info| {
        if output::QUIET_PANICS.load(Ordering::SeqCst) {
            return;
        }
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".to_owned());
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        output::say(&format!("internal error: {message}{place}"));
    }));
}
