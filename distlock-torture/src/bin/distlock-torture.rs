//! `distlock-torture`: runs distlock under faults and prints what it
//! survived.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use distlock_torture::client::{self, Workload};
use distlock_torture::link::SocketLink;
use distlock_torture::plan::rows_for;
use distlock_torture::report::{matrix, table};
use distlock_torture::{run, Fault, Plan, Row, Topology};
use tokio::sync::watch;

/// Runs distlock clients under faults on every store and topology this
/// machine can start (or those selected) and prints, for each, what the
/// fencing-checked register saw: acquisitions, faults injected, losses
/// signalled, stale writes refused, overlaps, unsafe writes accepted,
/// token regressions, leftovers and the longest wait while nobody held.
/// Exits with 1 when a configuration the docs call safe was not.
#[derive(Debug, Parser)]
#[command(name = "distlock-torture", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    selection: Selection,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One client process (started by the runner itself).
    #[command(hide = true)]
    Client(ClientArgs),
}

#[derive(Debug, Args)]
struct Selection {
    /// Only these stores (URL schemes: file, redis, redis+cluster,
    /// redis+sentinel, redlock, etcd, zk, postgres); repeat or separate with commas.
    #[arg(long, value_delimiter = ',')]
    store: Vec<String>,
    /// Only these topologies; repeat or separate with commas.
    #[arg(long, value_enum, value_delimiter = ',')]
    topology: Vec<Topology>,
    /// Only these fault classes (those that apply to each topology).
    #[arg(long, value_enum, value_delimiter = ',')]
    faults: Vec<Fault>,
    /// Total time, shared among the rows (each row runs at least until
    /// each of its faults was injected once).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Per topology, one row with every fault class its docs call safe,
    /// by turns (the run fails if it was not safe), and one row per class
    /// they do not (showing the documented violation); instead of one row
    /// per topology and fault class.
    #[arg(long)]
    mix: bool,
    /// The lease of every lock.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// Client tasks inside the runner.
    #[arg(long, default_value_t = 2)]
    tasks: usize,
    /// Client processes (the ones frozen, killed and cut off).
    #[arg(long, default_value_t = 3)]
    processes: usize,
    /// Locks the clients share; one election and (where the store has
    /// semaphores) one semaphore of 2 permits come on top.
    #[arg(long, default_value_t = 2)]
    keys: usize,
    /// Print one JSON array of rows instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ClientArgs {
    #[arg(long)]
    url: String,
    #[arg(long)]
    socket: PathBuf,
    #[arg(long)]
    id: u32,
    #[arg(long, value_delimiter = ',')]
    keys: Vec<String>,
    #[arg(long, value_parser = humantime::parse_duration)]
    ttl: Duration,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Client(args)) => match client_process(args).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("distlock-torture client: {e}");
                ExitCode::from(2)
            }
        },
        None => runner(cli.selection).await,
    }
}

async fn runner(selection: Selection) -> ExitCode {
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(e) => {
            eprintln!("distlock-torture: cannot find its own program: {e}");
            return ExitCode::from(2);
        }
    };
    let plans = plans(&selection, program);
    if plans.is_empty() {
        eprintln!("distlock-torture: the selection names no store, topology and fault that apply");
        return ExitCode::from(2);
    }
    let mut rows: Vec<Row> = Vec::new();
    let mut failed = false;
    for plan in &plans {
        let what = format!("{} under {:?}", plan.topology, plan.faults);
        eprintln!("distlock-torture: {what} for {:?}", plan.duration);
        match run(plan).await {
            Ok(row) => {
                eprintln!(
                    "distlock-torture: {}",
                    serde_json::to_string(&row).unwrap_or_default()
                );
                rows.push(row);
            }
            Err(e) => {
                eprintln!("distlock-torture: {what}: not run: {e}");
                failed = true;
            }
        }
    }
    if selection.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
    } else {
        print!("{}\n{}", table(&rows), matrix(&rows));
    }
    let broken: Vec<&Row> = rows.iter().filter(|r| r.broke_a_promise()).collect();
    for row in &broken {
        eprintln!(
            "distlock-torture: UNSAFE where the docs promise safety: {} ({}) under {}",
            row.store, row.topology, row.faults
        );
    }
    if !broken.is_empty() {
        ExitCode::from(1)
    } else if failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

/// The rows the selection asks for, sharing its duration.
fn plans(selection: &Selection, program: PathBuf) -> Vec<Plan> {
    let topologies = Topology::ALL.into_iter().filter(|t| {
        (selection.topology.is_empty() || selection.topology.contains(t))
            && (selection.store.is_empty() || selection.store.iter().any(|s| s == t.store()))
    });
    let mut groups: Vec<(Topology, Vec<Fault>)> = Vec::new();
    for topology in topologies {
        let faults: Vec<Fault> = Fault::ALL
            .into_iter()
            .filter(|f| f.applies_to(topology))
            .filter(|f| selection.faults.is_empty() || selection.faults.contains(f))
            .collect();
        if faults.is_empty() {
            continue;
        }
        groups.extend(
            rows_for(topology, &faults, selection.mix)
                .into_iter()
                .map(|faults| (topology, faults)),
        );
    }
    let share = selection.duration / u32::try_from(groups.len().max(1)).unwrap_or(u32::MAX);
    groups
        .into_iter()
        .map(|(topology, faults)| Plan {
            topology,
            faults,
            duration: share,
            tasks: selection.tasks,
            processes: selection.processes.max(1),
            keys: selection.keys,
            ttl: selection.ttl,
            program: program.clone(),
        })
        .collect()
}

/// A client process: runs until its stdin closes.
async fn client_process(args: ClientArgs) -> Result<(), String> {
    let locker = distlock_torture::run::connect(&args.url, args.ttl).await?;
    let link = SocketLink::connect(&args.socket, args.id).await?;
    let (stop, stopped) = watch::channel(false);
    std::thread::spawn(move || {
        // Anything read, or the end of stdin, means stop.
        let _ = std::io::stdin().read_line(&mut String::new());
        let _ = stop.send(true);
    });
    let workload = Workload {
        keys: args.keys,
        ttl: args.ttl,
    };
    client::run(&locker, &link, &workload, stopped).await
}
