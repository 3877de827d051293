//! What Redis itself charges for distlock's two scripts: a raw recipe
//! that sends the acquire and release scripts of lock-redis with the
//! plain client library (no distlock code on the path), measured side by
//! side with the `SET NX PX` + `DEL` floor of `distlock bench` and with
//! distlock's own lock+release on the same server.
//!
//! ```sh
//! cargo build --release -p distlock-cli --features redis --example redis_script_floor
//! target/release/examples/redis_script_floor "redis://127.0.0.1:6379" [REDIS_SERVER_PID]
//! ```
//!
//! Two measurements, each alternating the three contenders so that the
//! machine's noise hits them alike:
//!
//! * **uncontended**: one client, one key, lock+release in blocks of 50,
//!   twenty rounds; p50 of each and its ratio to the floor. Given the
//!   server's process id (Linux), also the CPU time the server's main
//!   thread spent per lock+release (`/proc/<pid>/task/<pid>/schedstat`).
//! * **16 clients, 1,000 keys**: each client its own connection (and,
//!   for distlock, its own locker), keys picked at random; four slices of
//!   two seconds per contender; acquisitions per second. Like the floor,
//!   the raw scripts run as a spin lock (the acquire script's mode '0':
//!   a refused attempt is not counted and not queued).
//!
//! `ONLY=Floor`, `ONLY=Scripts` or `ONLY=Ours` runs one contender's
//! throughput alone (for profiling the client, e.g. under `perf record`).
//!
//! The raw recipe takes its scripts and its keys' names from
//! `lock_redis::raw` (the scripts lock-redis runs, and the names it gives
//! a lock on one server), in a namespace of its own, and sends the same
//! arguments, each call one `EVALSHA` of a script loaded beforehand. Both
//! raw contenders build their names once per run, so that the client's
//! share of their figures is as small as the client library allows. Like
//! distlock, it leaves one key behind: its namespace's counter.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::LockName;
use redis::aio::ConnectionManager;
use redis::Script;

const CLIENTS: usize = 16;
const KEYS: usize = 1_000;
const TTL_MS: u64 = 10_000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Contender {
    Floor,
    Scripts,
    Ours,
}

const CONTENDERS: [Contender; 3] = [Contender::Floor, Contender::Scripts, Contender::Ours];

/// The names both raw contenders use, built once per run so that neither
/// formats names per operation.
struct Names {
    /// The floor's key of each of the `KEYS` keys.
    floor: Vec<String>,
    /// The scripts' seven names of each key, in their KEYS order.
    scripts: Vec<[String; 7]>,
}

impl Names {
    fn new(run: &str) -> Self {
        Self {
            floor: (0..KEYS)
                .map(|key| format!("distlock-floor:{{floor-{run}:k{key}}}"))
                .collect(),
            scripts: (0..KEYS)
                .map(|key| {
                    let name = LockName::parse(&format!("raw-{run}"), &format!("k{key}"));
                    lock_redis::raw::lock_keys(&name.expect("a valid lock name"))
                })
                .collect(),
        }
    }
}

/// One client: a raw connection, the two scripts' hashes, and a distlock
/// locker.
struct Client {
    raw: ConnectionManager,
    acquire: String,
    release: String,
    names: Arc<Names>,
    locker: distlock::Locker,
    owner: String,
    channel: String,
}

impl Client {
    async fn open(url: &str, index: usize, run: &str, names: Arc<Names>) -> Self {
        let config = lock_core::open::parse::<lock_redis::RedisStore>(url)
            .expect("a redis:// URL")
            .config;
        let mut raw = config
            .connection_manager(&config.nodes[0])
            .expect("a connection");
        let acquire = load_script(&mut raw, lock_redis::raw::acquire_script()).await;
        let release = load_script(&mut raw, lock_redis::raw::release_script()).await;
        Self {
            raw,
            acquire,
            release,
            names,
            locker: distlock::connect(&format!("{url}{}namespace=ours-{run}", sep(url)))
                .await
                .expect("a locker"),
            owner: format!("raw/{index}/{run}"),
            channel: format!("distlock:grants:raw/{index}/{run}"),
        }
    }

    /// One lock+release of `key`; false if the key was taken (floor and
    /// raw scripts only).
    async fn lock_release(&mut self, who: Contender, key: usize) -> bool {
        match who {
            Contender::Floor => {
                let name = &self.names.floor[key];
                let took: Option<String> = redis::cmd("SET")
                    .arg(name)
                    .arg("v")
                    .arg("NX")
                    .arg("PX")
                    .arg(TTL_MS)
                    .query_async(&mut self.raw)
                    .await
                    .expect("SET");
                if took.is_none() {
                    return false;
                }
                let _: i64 = redis::cmd("DEL")
                    .arg(name)
                    .query_async(&mut self.raw)
                    .await
                    .expect("DEL");
                true
            }
            Contender::Scripts => {
                let names = &self.names.scripts[key];
                let reply: Vec<i64> = redis::cmd("EVALSHA")
                    .arg(&self.acquire)
                    .arg(names.len())
                    .arg(names)
                    .arg(&self.owner)
                    .arg(TTL_MS)
                    .arg(0)
                    .arg(3_000)
                    .arg(&self.channel)
                    .arg("")
                    .query_async(&mut self.raw)
                    .await
                    .expect("acquire script");
                if reply[0] != 1 {
                    return false;
                }
                let released: i64 = redis::cmd("EVALSHA")
                    .arg(&self.release)
                    .arg(names.len())
                    .arg(names)
                    .arg(&self.owner)
                    .arg(0)
                    .query_async(&mut self.raw)
                    .await
                    .expect("release script");
                assert_eq!(released, 1, "the raw recipe released its own lock");
                true
            }
            Contender::Ours => {
                let guard = self.locker.lock(&format!("k{key}")).await.expect("lock");
                guard.release().await.expect("release");
                true
            }
        }
    }
}

/// Loads `script` into the server's script cache; its hash.
async fn load_script(raw: &mut ConnectionManager, script: &Script) -> String {
    script.load_async(raw).await.expect("SCRIPT LOAD")
}

fn sep(url: &str) -> &'static str {
    if url.contains('?') {
        "&"
    } else {
        "?"
    }
}

/// The CPU time the main thread of process `pid` has used, in ns.
fn server_cpu(pid: Option<&str>) -> Option<u64> {
    let pid = pid?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/schedstat")).ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

/// The CPU time this process has used (all threads), in ns.
fn own_cpu() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields
        .get(11..13)
        .map_or(0, |f| f.iter().filter_map(|t| t.parse::<u64>().ok()).sum());
    ticks * 10_000_000
}

fn p50(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

async fn uncontended(client: &mut Client, pid: Option<&str>) {
    let mut times = [vec![], vec![], vec![]];
    let mut cpu = [0u64; 3];
    for round in 0..21 {
        for (i, who) in CONTENDERS.into_iter().enumerate() {
            let before = server_cpu(pid);
            for _ in 0..50 {
                let started = Instant::now();
                assert!(client.lock_release(who, 0).await, "uncontended");
                if round > 0 {
                    times[i].push(started.elapsed());
                }
            }
            if let (true, Some(a), Some(b)) = (round > 0, before, server_cpu(pid)) {
                cpu[i] += b - a;
            }
        }
    }
    let ops = times[0].len() as u64;
    let floor = p50(&mut times[0]);
    println!("uncontended lock+release, one client, p50 (x floor), server CPU per op:");
    for (i, who) in CONTENDERS.into_iter().enumerate() {
        let p = p50(&mut times[i]);
        let ratio = p.as_secs_f64() / floor.as_secs_f64();
        let server = match pid {
            Some(_) => format!("{:.1} us", cpu[i] as f64 / ops as f64 / 1_000.0),
            None => "n/a".to_owned(),
        };
        println!("  {who:8?} {p:>12.1?}  x{ratio:.2}  {server}");
    }
}

async fn throughput(clients: Vec<Client>, pid: Option<&str>) {
    let clients: Vec<_> = clients
        .into_iter()
        .map(|c| Arc::new(tokio::sync::Mutex::new(c)))
        .collect();
    let mut rates = [vec![], vec![], vec![]];
    let mut client_cpu = [0u64; 3];
    let mut server = [0u64; 3];
    let mut ops = [0u64; 3];
    for _slice in 0..4 {
        for (i, who) in CONTENDERS.into_iter().enumerate() {
            if std::env::var("ONLY").is_ok_and(|o| o != format!("{who:?}")) {
                continue;
            }
            let stop = Arc::new(AtomicBool::new(false));
            let done = Arc::new(AtomicU64::new(0));
            let started = Instant::now();
            let (cpu0, server0) = (own_cpu(), server_cpu(pid));
            let tasks: Vec<_> = clients
                .iter()
                .enumerate()
                .map(|(n, client)| {
                    let (client, stop, done) = (client.clone(), stop.clone(), done.clone());
                    tokio::spawn(async move {
                        let mut rng = fastrand::Rng::with_seed(n as u64);
                        let mut client = client.lock().await;
                        while !stop.load(Ordering::Relaxed) {
                            if client.lock_release(who, rng.usize(..KEYS)).await {
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            tokio::time::sleep(Duration::from_secs(2)).await;
            stop.store(true, Ordering::Relaxed);
            for task in tasks {
                task.await.expect("a client");
            }
            client_cpu[i] += own_cpu() - cpu0;
            if let (Some(a), Some(b)) = (server0, server_cpu(pid)) {
                server[i] += b - a;
            }
            ops[i] += done.load(Ordering::Relaxed);
            rates[i].push(done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64());
        }
    }
    let total = |i: usize| rates[i].iter().sum::<f64>() / rates[i].len() as f64;
    println!("{CLIENTS} clients, {KEYS} keys, acquisitions/s (x floor), CPU per acquisition of the clients and of the server's main thread:");
    for (i, who) in CONTENDERS.into_iter().enumerate() {
        let per_op = |ns: u64| ns as f64 / ops[i].max(1) as f64 / 1_000.0;
        let server = match pid {
            Some(_) => format!("{:.1} us", per_op(server[i])),
            None => "n/a".to_owned(),
        };
        println!(
            "  {who:8?} {:>10.0}  x{:.2}  clients {:.1} us  server {server}",
            total(i),
            total(i) / total(0),
            per_op(client_cpu[i]),
        );
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (url, pid) = match args.as_slice() {
        [_, url] => (url.clone(), None),
        [_, url, pid] => (url.clone(), Some(pid.clone())),
        _ => {
            eprintln!("usage: redis_script_floor REDIS_URL [REDIS_SERVER_PID]");
            std::process::exit(2);
        }
    };
    let run = format!("{:08x}", fastrand::u32(..));
    let names = Arc::new(Names::new(&run));
    let mut clients = Vec::new();
    for index in 0..CLIENTS {
        clients.push(Client::open(&url, index, &run, Arc::clone(&names)).await);
    }
    if std::env::var("ONLY").is_err() {
        uncontended(&mut clients[0], pid.as_deref()).await;
    }
    throughput(clients, pid.as_deref()).await;
}
