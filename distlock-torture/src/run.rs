//! One row: a deployment, clients looping over a few keys, the nemesis
//! injecting faults by turns, and the figures at the end.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::Locker;
use tempfile::TempDir;
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};

use crate::client::{self, Workload};
use crate::deployment::Deployment;
use crate::faults::Fault;
use crate::fleet::{addrs_through, proxies_for, ClientCommand, Fleet};
use crate::link::{serve, DirectLink};
use crate::nemesis::Nemesis;
use crate::plan::Plan;
use crate::primitive::{self, Primitive};
use crate::register::Register;
use crate::report::Row;

/// How many times in a row a fault may find nothing to act on (no client
/// process holding a lock within its wait) before the row fails.
const MAX_MISSES: u64 = 10;

/// Ids of client processes start here; tasks count from 1.
const FIRST_PROCESS_ID: u32 = 1000;

/// Runs `plan` and returns its row.
pub async fn run(plan: &Plan) -> Result<Row, String> {
    let deployment = Deployment::start(plan.topology).await?;
    let register = Arc::new(Register::new());
    let served = ServedRegister::start(&register)?;

    let namespace = unique_namespace();
    let task_proxies = proxies_for(&deployment)?;
    let task_url = deployment.url(
        &addrs_through(&deployment, &task_proxies),
        &namespace,
        plan.ttl,
    );
    let capabilities = connect(&task_url, plan.ttl).await?.capabilities();
    let keys = primitive::keys(
        plan.keys,
        capabilities.semaphores,
        capabilities.shared_locks,
    );
    let workload = Arc::new(Workload {
        keys: keys.clone(),
        ttl: plan.ttl,
    });
    let (stop, stopped) = watch::channel(false);
    let tasks = start_tasks(plan, &task_url, &register, &workload, &stopped).await?;
    let command = ClientCommand {
        program: plan.program.clone(),
        socket: served.socket.clone(),
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
        let deadline = started + plan.duration;
        by_turns(&mut nemesis, &plan.faults, deadline, plan.ttl).await?
    };
    let seconds = started.elapsed().as_secs_f64();

    let _ = stop.send(true);
    let grace = plan.ttl * 4;
    let killed_at_stop = fleet.stop(grace).await;
    stop_tasks(tasks, grace).await?;
    let figures = register.figures();
    served.task.abort();
    for incident in register.incidents() {
        eprintln!("distlock-torture: {}: {incident}", plan.topology);
    }
    let leftovers = leftovers(&deployment, &namespace, &keys, plan.ttl).await?;
    Ok(Row::new(
        plan,
        seconds,
        injected,
        figures,
        leftovers,
        killed_at_stop,
    ))
}

/// The register served to client processes on a Unix socket in a
/// directory of its own (removed when this is dropped).
struct ServedRegister {
    /// Where client processes connect.
    socket: PathBuf,
    /// The task serving it.
    task: JoinHandle<()>,
    _dir: TempDir,
}

impl ServedRegister {
    /// Serves `register` on a fresh socket.
    fn start(register: &Arc<Register>) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("socket directory: {e}"))?;
        let socket = dir.path().join("register.sock");
        let listener = UnixListener::bind(&socket).map_err(|e| format!("register socket: {e}"))?;
        let task = tokio::spawn(serve(Arc::clone(register), listener));
        Ok(Self {
            socket,
            task,
            _dir: dir,
        })
    }
}

/// Starts the runner's client tasks, each with its own locker on `url`,
/// until `stopped` turns true.
async fn start_tasks(
    plan: &Plan,
    url: &str,
    register: &Arc<Register>,
    workload: &Arc<Workload>,
    stopped: &watch::Receiver<bool>,
) -> Result<Vec<JoinHandle<Result<(), String>>>, String> {
    let mut tasks = Vec::new();
    for id in 1..=plan.tasks as u32 {
        let locker = connect(url, plan.ttl).await?;
        let link = DirectLink::new(Arc::clone(register), id);
        let (workload, stopped) = (Arc::clone(workload), stopped.clone());
        tasks.push(tokio::spawn(async move {
            client::run(&locker, &link, &workload, stopped).await
        }));
    }
    Ok(tasks)
}

/// Waits up to `grace` for each client task to stop, passing on its
/// error.
async fn stop_tasks(
    tasks: Vec<JoinHandle<Result<(), String>>>,
    grace: Duration,
) -> Result<(), String> {
    for task in tasks {
        match timeout(grace, task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => return Err(format!("client task: {e}")),
            Ok(Err(e)) => return Err(format!("client task: {e}")),
            Err(_) => return Err("a client task did not stop".into()),
        }
    }
    Ok(())
}

/// How many still hold the keys one ttl after everyone stopped, asked
/// without a proxy.
async fn leftovers(
    deployment: &Deployment,
    namespace: &str,
    keys: &[String],
    ttl: Duration,
) -> Result<u64, String> {
    sleep(ttl + Duration::from_millis(500)).await;
    let direct = deployment.url(&deployment.client_addrs, namespace, ttl);
    let checker = connect(&direct, ttl).await?;
    let mut leftovers = 0;
    for key in keys {
        leftovers += held_on_once_answered(&checker, key, ttl).await?;
    }
    Ok(leftovers)
}

/// [`held_on`], asked again while the store is unavailable for up to ten
/// ttls: the row's last fault may have ended just before the clients
/// stopped, and a deployment healing from it (a Redis Cluster or Sentinel
/// failover settling) may not answer at once.
async fn held_on_once_answered(checker: &Locker, key: &str, ttl: Duration) -> Result<u64, String> {
    let until = Instant::now() + ttl * 10;
    loop {
        match held_on(checker, key).await {
            Ok(held) => return Ok(held),
            Err(e) if e.is_retriable() && Instant::now() < until => sleep(ttl / 4).await,
            Err(e) => return Err(format!("inspect {key}: {e}")),
        }
    }
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
        Primitive::ReadWrite => checker.holders(key).await?.len() as u64,
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
