//! distlock's etcd `layout=concurrency` beside etcd's own client on one
//! spawned etcd: `etcdctl lock` and `etcdctl elect` (etcdctl 3.4, found
//! on `PATH`; without it these tests fail saying what to install) share
//! locks and elections with distlock holders, in one line of waiters.
//! Frozen peers are in `etcd_concurrency_faults`.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::connect;
use distlock_testkit::child::TestChild;
use distlock_testkit::etcd::{raw_client, shared_etcd_url, TEST_TIMEOUTS};
use distlock_testkit::etcdctl::{keys_by_creation, Etcdctl, KeyEntry, CREATE_REVISION_SH};
use distlock_testkit::{assert_not_before, eventually, signal_group, FencedResource};
use lock_core::{LockOptions, Locker};

/// How long anything here may take on a busy 2-core machine.
const LIMIT: Duration = Duration::from_secs(20);

fn wait(limit: Duration) -> LockOptions {
    LockOptions::new().wait(limit)
}

/// The server, `etcdctl` on it, and a raw client to read its keys.
struct Peers {
    url: String,
    etcdctl: Etcdctl,
    client: etcd_client::Client,
}

async fn peers() -> Peers {
    let url = shared_etcd_url().await.expect("etcd test server");
    let etcdctl = Etcdctl::for_url(&url).unwrap_or_else(|e| panic!("{e}"));
    let client = raw_client(&url).await.expect("a raw etcd client");
    Peers {
        url,
        etcdctl,
        client,
    }
}

impl Peers {
    /// A locker on the layout, with session ttl `ttl` (`3s`).
    async fn locker(&self, ttl: &str) -> Locker {
        self.locker_under("", ttl).await
    }

    /// A locker on the layout whose names are prefixed by `key_prefix`.
    async fn locker_under(&self, key_prefix: &str, ttl: &str) -> Locker {
        let url = format!(
            "{}?ttl={ttl}&layout=concurrency&key_prefix={key_prefix}&{TEST_TIMEOUTS}",
            self.url
        );
        connect(&url).await.expect("connect")
    }

    /// The keys of lock `name`, oldest first.
    async fn keys(&self, name: &str) -> Vec<KeyEntry> {
        keys_by_creation(&self.client, &format!("{name}/"))
            .await
            .expect("read the lock's keys")
    }

    /// Waits until lock `name` has `count` keys, and returns them.
    async fn wait_for_keys(&self, name: &str, count: usize) -> Vec<KeyEntry> {
        let what = format!("{count} keys under {name}/");
        eventually(LIMIT, &what, || async {
            let keys = self.keys(name).await;
            (keys.len() == count).then_some(keys)
        })
        .await
        .unwrap()
    }
}

/// Waits until `child` has exited (its stdout closed).
async fn exited(child: &mut TestChild) {
    let drained = async { while child.lines.recv().await.is_some() {} };
    tokio::time::timeout(LIMIT, drained)
        .await
        .expect("etcdctl did not exit");
}

/// Appends `line` to the file `log`.
fn append(log: &Path, line: &str) {
    let mut file = OpenOptions::new().append(true).open(log).unwrap();
    writeln!(file, "{line}").unwrap();
}

// ------------------------------------------------------------ counter

/// The critical section of every holder: note the entry with its token,
/// read the counter, pause, write it + 1, note the exit.
const COUNTER_SH: &str = r#"
echo "enter $TOKEN" >> "$LOG"
n=$(cat "$COUNTER"); sleep 0.05; echo $((n + 1)) > "$COUNTER"
echo "leave $TOKEN" >> "$LOG"
"#;

/// A distlock holder's round of [`COUNTER_SH`].
async fn distlock_round(locker: &Locker, name: &str, (counter, log): (&Path, &Path)) {
    let guard = locker.lock_with(name, wait(LIMIT)).await.unwrap();
    let token = guard.token().get();
    append(log, &format!("enter {token}"));
    let n: u64 = std::fs::read_to_string(counter)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    std::fs::write(counter, format!("{}\n", n + 1)).unwrap();
    append(log, &format!("leave {token}"));
    guard.release().await.unwrap();
}

/// Checks the log of critical sections: never two holders inside at
/// once, each leaving with the token it entered with, tokens rising (a
/// fenced register accepts every one); returns how many there were.
fn check_sections(log: &str) -> usize {
    let register = FencedResource::new();
    let (mut inside, mut last, mut sections) = (None::<u64>, 0, 0);
    for line in log.lines() {
        let (what, token) = line.split_once(' ').expect("`enter T` or `leave T`");
        let token: u64 = token.trim().parse().expect("a token");
        match what {
            "enter" => {
                assert_eq!(inside, None, "{token} entered while {inside:?} was inside");
                assert!(token > last, "token {token} after {last}");
                inside = Some(token);
                (last, sections) = (token, sections + 1);
            }
            _ => assert_eq!(inside.take(), Some(token), "{token} left, not inside"),
        }
        register.write(token, line).expect("a stale token");
    }
    sections
}

/// `etcdctl lock` processes and distlock lockers increment one counter
/// under one lock, read-pause-write: the total is exact, no two are ever
/// inside at once, and their tokens (etcdctl's read as its key's create
/// revision) rise from each holder to the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_and_distlock_holders_exclude_each_other() {
    const ROUNDS: usize = 3;
    const ETCDCTLS: usize = 3;
    const LOCKERS: usize = 2;
    let peers = peers().await;
    let name = "peers-counter";
    let dir = tempfile::tempdir().unwrap();
    let (counter, log): (PathBuf, PathBuf) = (dir.path().join("counter"), dir.path().join("log"));
    std::fs::write(&counter, "0\n").unwrap();
    std::fs::write(&log, "").unwrap();
    let script = format!("{CREATE_REVISION_SH}\n{COUNTER_SH}");
    let mut holders = tokio::task::JoinSet::new();
    for _ in 0..ETCDCTLS {
        let (etcdctl, script) = (peers.etcdctl.clone(), script.clone());
        let (counter, log) = (counter.clone(), log.clone());
        holders.spawn(async move {
            for _ in 0..ROUNDS {
                let mut command = etcdctl.lock(name, None, &script);
                command.env("COUNTER", &counter).env("LOG", &log);
                exited(&mut TestChild::start(command).await).await;
            }
        });
    }
    for _ in 0..LOCKERS {
        let locker = peers.locker("3s").await;
        let (counter, log) = (counter.clone(), log.clone());
        holders.spawn(async move {
            for _ in 0..ROUNDS {
                distlock_round(&locker, name, (&counter, &log)).await;
            }
        });
    }
    let all = async {
        while let Some(done) = holders.join_next().await {
            done.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("the holders did not finish");
    let total = (ETCDCTLS + LOCKERS) * ROUNDS;
    let log = std::fs::read_to_string(&log).unwrap();
    assert_eq!(check_sections(&log), total, "{log}");
    let counted = std::fs::read_to_string(&counter).unwrap();
    assert_eq!(counted.trim(), total.to_string(), "increments were lost");
}

// ------------------------------------------------------------ FIFO

/// Waiters of both clients, queued behind a distlock holder in a known
/// order (each one's key seen in etcd before the next asks), are served
/// in that order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_both_clients_are_served_in_creation_order() {
    let peers = peers().await;
    let name = "peers-fifo";
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("served");
    std::fs::write(&log, "").unwrap();
    let holder = peers.locker("3s").await.lock(name).await.unwrap();
    let order = ["etcdctl 1", "distlock 1", "etcdctl 2", "distlock 2"];
    let (mut children, mut tasks) = (Vec::new(), Vec::new());
    for (i, who) in order.into_iter().enumerate() {
        if who.starts_with("etcdctl") {
            let mut command = peers.etcdctl.lock(name, None, r#"echo "$WHO" >> "$LOG""#);
            command.env("WHO", who).env("LOG", &log);
            children.push(TestChild::start(command).await);
        } else {
            let (locker, log) = (peers.locker("3s").await, log.clone());
            tasks.push(tokio::spawn(async move {
                let guard = locker.lock_with(name, wait(LIMIT)).await.unwrap();
                append(&log, who);
                guard.release().await.unwrap();
            }));
        }
        peers.wait_for_keys(name, i + 2).await;
    }
    holder.release().await.unwrap();
    for task in tasks {
        tokio::time::timeout(LIMIT, task).await.unwrap().unwrap();
    }
    for child in &mut children {
        exited(child).await;
    }
    let served = std::fs::read_to_string(&log).unwrap();
    assert_eq!(served.lines().collect::<Vec<_>>(), order);
}

// ------------------------------------------------------------ killed peer

/// An `etcdctl lock --ttl 2` holder killed with SIGKILL keeps the lock
/// until its lease expires; then a distlock waiter gets it, with a
/// higher token. The waiter names the lock under `key_prefix`, etcdctl
/// with the prefix in the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_etcdctl_holder_is_followed_once_its_lease_expires() {
    let peers = peers().await;
    let (key_prefix, name) = ("peers-app/", "killed");
    let script = format!("{CREATE_REVISION_SH}\necho \"HELD $TOKEN\"\nsleep 60");
    let prefixed = format!("{key_prefix}{name}");
    let mut holder = TestChild::start(peers.etcdctl.lock(&prefixed, Some(2), &script)).await;
    let old: u64 = holder.expect("HELD").await.parse().unwrap();
    let locker = peers.locker_under(key_prefix, "3s").await;
    assert!(locker.try_lock(name).await.unwrap().is_none());
    signal_group(holder.pid(), libc::SIGKILL).unwrap();
    let killed_at = Instant::now();
    let guard = locker.lock_with(name, wait(LIMIT)).await.unwrap();
    // Kept alive every ttl/3, the lease had more than a second left.
    assert_not_before(killed_at, Duration::from_secs(1), "in after the kill");
    assert!(guard.token().get() > old, "{} after {old}", guard.token());
    guard.release().await.unwrap();
}

// ------------------------------------------------------------ one locker, twice

/// A locker taking a name it holds gets a second key on a lease of its
/// own: `try_lock` finds it held, `lock` waits in line behind the first
/// hold and gets its own token; the second lease is revoked with the
/// hold, the session lease stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_locker_taking_a_name_twice_queues_on_a_second_lease() {
    let peers = peers().await;
    let name = "peers-twice";
    let locker = peers.locker("3s").await;
    let first = locker.lock(name).await.unwrap();
    assert!(locker.try_lock(name).await.unwrap().is_none());
    let session_lease = peers.wait_for_keys(name, 1).await[0].lease;
    let second = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.lock_with(name, wait(LIMIT)).await })
    };
    let keys = peers.wait_for_keys(name, 2).await;
    assert_eq!(keys[0].lease, session_lease);
    assert_ne!(keys[1].lease, session_lease, "one lease, two keys");
    assert_eq!(keys[0].create_revision as u64, first.token().get());
    first.release().await.unwrap();
    let second = tokio::time::timeout(LIMIT, second)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(second.token().get(), keys[1].create_revision as u64);
    second.release().await.unwrap();
    let ttl = |lease| {
        let mut leases = peers.client.lease_client();
        async move { leases.time_to_live(lease, None).await.unwrap().ttl() }
    };
    // etcd answers -1 for a lease it does not know.
    assert_eq!(
        ttl(keys[1].lease).await,
        -1,
        "the second lease outlived its hold"
    );
    assert!(ttl(session_lease).await > 0, "the session lease is gone");
    assert!(peers.keys(name).await.is_empty());
}

// ------------------------------------------------------------ elections

/// The next leader `observe` reports, skipping moments without one.
async fn next_leader(observe: &mut lock_core::LeaderWatch) -> lock_core::LeaderInfo {
    let leader = async {
        loop {
            if let Some(leader) = observe.changed().await {
                return leader;
            }
        }
    };
    tokio::time::timeout(LIMIT, leader)
        .await
        .expect("no leader observed")
}

/// `etcdctl elect` and distlock candidates on one election: one leader
/// at a time; distlock's observer shows etcdctl's leader with its value
/// (its key as the owner), `etcdctl elect -l` shows distlock's with its
/// value and proclaimed value, and each term is the leader key's create
/// revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_and_distlock_candidates_share_one_election() {
    let peers = peers().await;
    let name = "peers-election";
    let mut theirs = TestChild::start(peers.etcdctl.elect(name, "etcdctl leads")).await;
    let their_key = theirs.next_line(LIMIT).await;
    assert_eq!(theirs.next_line(LIMIT).await, "etcdctl leads");
    let their_term = peers.keys(name).await[0].create_revision as u64;
    let observer = peers.locker("3s").await;
    let mut observe = observer.election(name).unwrap().observe();
    let seen = next_leader(&mut observe).await;
    let seen = (seen.owner.as_str(), seen.term.get(), seen.value.as_str());
    assert_eq!(seen, (their_key.as_str(), their_term, "etcdctl leads"));

    let candidate = peers.locker("3s").await.election(name).unwrap();
    let campaign = tokio::spawn(async move { candidate.campaign("distlock leads").await });
    peers.wait_for_keys(name, 2).await;
    assert!(!campaign.is_finished(), "two leaders at once");
    // SIGTERM makes etcdctl resign before it exits.
    signal_group(theirs.pid(), libc::SIGTERM).unwrap();
    let leader = tokio::time::timeout(LIMIT, campaign)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let keys = peers.keys(name).await;
    assert_eq!(keys.len(), 1, "etcdctl's key outlived its leadership");
    assert_eq!(leader.term().get(), keys[0].create_revision as u64);
    assert!(leader.term().get() > their_term);
    let seen = next_leader(&mut observe).await;
    assert_eq!(
        (seen.owner.as_str(), seen.term),
        (leader.owner().as_str(), leader.term())
    );
    assert_eq!(seen.value, "distlock leads");

    let mut listener = TestChild::start(peers.etcdctl.observe(name)).await;
    assert_eq!(listener.next_line(LIMIT).await, keys[0].key);
    assert_eq!(listener.next_line(LIMIT).await, "distlock leads");
    leader.proclaim("distlock proclaims").await.unwrap();
    assert_eq!(listener.next_line(LIMIT).await, keys[0].key);
    assert_eq!(listener.next_line(LIMIT).await, "distlock proclaims");
    leader.resign().await.unwrap();
    exited(&mut theirs).await;
}
