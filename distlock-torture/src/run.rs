//! One row: a deployment, clients looping over a few keys, the nemesis
//! injecting faults by turns, and the figures at the end.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::Locker;
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio::time::{sleep, timeout, Instant};

use crate::client::{self, Workload};
use crate::deployment::{Deployment, Topology};
use crate::faults::Fault;
use crate::fleet::{addrs_through, proxies_for, ClientCommand, Fleet};
use crate::journal::{serve, LocalJournal};
use crate::nemesis::Nemesis;
use crate::primitive::{self, Primitive};
use crate::register::Register;
use crate::report::Row;

/// How many times in a row a fault may find nothing to act on (no client
/// process holding a lock within its wait) before the row fails.
const MAX_MISSES: u64 = 10;

/// Ids of client processes start here; tasks count from 1.
const FIRST_PROCESS_ID: u32 = 1000;

/// What one row runs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The deployment.
    pub topology: Topology,
    /// The faults, injected by turns (each at least once).
    pub faults: Vec<Fault>,
    /// How long clients run (longer if the faults need it).
    pub duration: Duration,
    /// Client tasks inside the runner.
    pub tasks: usize,
    /// Client processes (one client each).
    pub processes: usize,
    /// Locks the clients share (besides one election and, where the
    /// store has semaphores, one semaphore).
    pub keys: usize,
    /// The lease of every lock.
    pub ttl: Duration,
    /// The `distlock-torture` program, started for client processes.
    pub program: PathBuf,
}

/// Runs `plan` and returns its row.
pub async fn run(plan: &Plan) -> Result<Row, String> {
    let deployment = Deployment::start(plan.topology).await?;
    let register = Arc::new(Register::new());
    let socket_dir = tempfile::tempdir().map_err(|e| format!("socket directory: {e}"))?;
    let socket = socket_dir.path().join("register.sock");
    let listener = UnixListener::bind(&socket).map_err(|e| format!("register socket: {e}"))?;
    let server = tokio::spawn(serve(Arc::clone(&register), listener));

    let namespace = unique_namespace();
    let task_proxies = proxies_for(&deployment)?;
    let task_url = deployment.url(
        &addrs_through(&deployment, &task_proxies),
        &namespace,
        plan.ttl,
    );
    let semaphores = connect(&task_url, plan.ttl)
        .await?
        .capabilities()
        .semaphores;
    let keys = primitive::keys(plan.keys, semaphores);
    let workload = Arc::new(Workload {
        keys: keys.clone(),
        ttl: plan.ttl,
    });
    let (stop, stopped) = watch::channel(false);
    let mut tasks = Vec::new();
    for id in 1..=plan.tasks as u32 {
        let locker = connect(&task_url, plan.ttl).await?;
        let journal = LocalJournal::new(Arc::clone(&register), id);
        let (workload, stopped) = (Arc::clone(&workload), stopped.clone());
        tasks.push(tokio::spawn(async move {
            client::run(&locker, &journal, &workload, stopped).await
        }));
    }
    let command = ClientCommand {
        program: plan.program.clone(),
        socket,
        namespace: namespace.clone(),
        keys: keys.clone(),
        ttl: plan.ttl,
    };
    let mut fleet = Fleet::start(&deployment, command, plan.processes, FIRST_PROCESS_ID).await?;

    let started = Instant::now();
    let injected = {
        let mut nemesis = Nemesis {
            deployment: &deployment,
            fleet: &mut fleet,
            register: &register,
            task_proxies: &task_proxies,
            ttl: plan.ttl,
        };
        by_turns(
            &mut nemesis,
            &plan.faults,
            started + plan.duration,
            plan.ttl,
        )
        .await?
    };
    let seconds = started.elapsed().as_secs_f64();

    let _ = stop.send(true);
    let grace = plan.ttl * 4;
    let killed_at_stop = fleet.stop(grace).await;
    for task in tasks {
        match timeout(grace, task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => return Err(format!("client task: {e}")),
            Ok(Err(e)) => return Err(format!("client task: {e}")),
            Err(_) => return Err("a client task did not stop".into()),
        }
    }
    let figures = register.figures();
    server.abort();
    for incident in register.incidents() {
        eprintln!("distlock-torture: {}: {incident}", plan.topology);
    }

    // What is still there one ttl after everyone stopped.
    sleep(plan.ttl + Duration::from_millis(500)).await;
    let direct = deployment.url(&deployment.client_addrs, &namespace, plan.ttl);
    let checker = connect(&direct, plan.ttl).await?;
    let mut leftovers = 0;
    for key in &keys {
        leftovers += held_on(&checker, key)
            .await
            .map_err(|e| format!("inspect {key}: {e}"))?;
    }

    Ok(Row::new(
        plan,
        seconds,
        injected,
        figures,
        leftovers,
        killed_at_stop,
    ))
}

/// Injects the faults by turns, a ttl apart, until `deadline` has passed
/// and each was injected at least once (failing when one finds nothing
/// to act on [`MAX_MISSES`] times before its first injection).
async fn by_turns(
    nemesis: &mut Nemesis<'_>,
    faults: &[Fault],
    deadline: Instant,
    ttl: Duration,
) -> Result<BTreeMap<Fault, u64>, String> {
    let mut injected: BTreeMap<Fault, u64> = faults.iter().map(|f| (*f, 0)).collect();
    let mut missed: BTreeMap<Fault, u64> = BTreeMap::new();
    loop {
        for &fault in faults {
            let pending = injected.values().any(|n| *n == 0);
            if Instant::now() >= deadline && !pending {
                return Ok(injected);
            }
            sleep(ttl).await;
            if nemesis.inject(fault).await? {
                *injected.entry(fault).or_default() += 1;
            } else {
                let misses = missed.entry(fault).or_default();
                *misses += 1;
                if *misses >= MAX_MISSES && injected[&fault] == 0 {
                    return Err(format!("{fault}: no client process held a lock to act on"));
                }
            }
        }
        if faults.is_empty() {
            sleep(deadline.saturating_duration_since(Instant::now())).await;
            return Ok(injected);
        }
    }
}

/// How many hold `key` (its permits, for a semaphore).
async fn held_on(checker: &Locker, key: &str) -> Result<u64, distlock::LockError> {
    Ok(match Primitive::of(key) {
        Primitive::Semaphore { limit } => {
            checker.semaphore(key, limit)?.holders().await?.len() as u64
        }
        Primitive::Lock | Primitive::Election => u64::from(checker.inspect(key).await?.is_some()),
    })
}

/// Opens a locker, retrying for a while: a server may be restarting.
pub async fn connect(url: &str, ttl: Duration) -> Result<Locker, String> {
    let until = Instant::now() + ttl * 10;
    loop {
        match distlock::connect(url).await {
            Ok(locker) => return Ok(locker),
            Err(e) if Instant::now() >= until => return Err(format!("connect: {e}")),
            Err(_) => sleep(ttl / 10).await,
        }
    }
}

fn unique_namespace() -> String {
    static RUN: AtomicU32 = AtomicU32::new(0);
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    format!("torture-{}-{run}", std::process::id())
}
