//! `distlock-peer-bench`: how fast a lock or a leadership moves between
//! distlock and the clients it joins (etcdctl on etcd, Apache Curator on
//! ZooKeeper), beside the same move within each family, on servers it
//! starts itself.

use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use distlock_torture::peers::curator::CuratorFamily;
use distlock_torture::peers::etcd::EtcdFamily;
use distlock_torture::peers::{rows, table, Family};

/// Measures hand-offs of a lock (release to the waiter holding) and
/// failovers of a leadership (resign to the candidate leading) between a
/// peer holder and a distlock waiter, both ways, and within each family,
/// and prints p50 and p99 per row as a Markdown table.
#[derive(Debug, Parser)]
#[command(name = "distlock-peer-bench", version)]
struct Cli {
    /// Which peer families (default: both).
    #[arg(long, value_enum, value_delimiter = ',')]
    family: Vec<Which>,
    /// Measured samples per row (after a few unreported ones).
    #[arg(long, default_value_t = 50)]
    samples: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Which {
    /// etcdctl lock / elect against etcd `layout=concurrency`.
    Etcdctl,
    /// Curator InterProcessMutex / LeaderLatch against ZooKeeper `layout=curator`.
    Curator,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let families = if cli.family.is_empty() {
        vec![Which::Etcdctl, Which::Curator]
    } else {
        cli.family.clone()
    };
    let mut all = Vec::new();
    for which in families {
        let family: Result<Box<dyn Family>, String> = match which {
            Which::Etcdctl => EtcdFamily::start()
                .await
                .map(|f| Box::new(f) as Box<dyn Family>),
            Which::Curator => CuratorFamily::start()
                .await
                .map(|f| Box::new(f) as Box<dyn Family>),
        };
        let measured = match family {
            Ok(family) => rows(&*family, cli.samples).await,
            Err(e) => Err(e),
        };
        match measured {
            Ok(rows) => all.extend(rows),
            Err(e) => {
                print!("{}", table(&all));
                eprintln!("distlock-peer-bench: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    print!("{}", table(&all));
    ExitCode::SUCCESS
}
