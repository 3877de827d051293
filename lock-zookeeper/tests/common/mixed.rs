//! Mixed fleets on one ZooKeeper: distlock lockers with `layout=curator`
//! and peers of another client family (Curator, kazoo) on the same paths,
//! and a ledger of what their holds did (a counter, a read-write fencing
//! register, who was inside at once).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_testkit::curator::{Holder, Kind, RecipePeer};
use distlock_testkit::scenarios::rw_faults::{Access, RwRegister};
use distlock_testkit::zookeeper::{raw_client, zk_url};
use lock_core::Locker;
use tokio::task::JoinSet;
use tokio::time::{sleep, timeout};

use super::{local_standalone, SLACK};

/// The session timeout of every client of a fleet, distlock's and the
/// peers'.
pub(crate) const TTL: Duration = Duration::from_secs(2);
/// How many holds each holder of the mixed runs takes.
pub(crate) const ROUNDS: usize = 4;
/// How long a holder of the mixed runs keeps its hold: the gap between
/// its read and its write that an overlapping holder would fall into.
const WORK: Duration = Duration::from_millis(15);
/// What a mixed run may take in all, on a busy 2-core machine.
const RUN_LIMIT: Duration = Duration::from_secs(90);

/// Which client family the peers of a [`Fleet`] are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Peers {
    /// Apache Curator (a JVM each).
    Curator,
    /// kazoo's Lock, told to see Curator's `-lock-` nodes.
    Kazoo,
}

/// One test's corner of the shared server: distlock lockers with
/// `layout=curator` under `base`, peers of one family on the same server.
pub(crate) struct Fleet {
    pub(crate) addr: SocketAddr,
    pub(crate) base: String,
    pub(crate) raw: zookeeper_client::Client,
    peers: Peers,
}

impl Fleet {
    /// A fleet under a base path named after `test`, with `peers`.
    pub(crate) async fn new(test: &str, peers: Peers) -> Self {
        let addr = local_standalone().await;
        let raw = raw_client(&[addr]).await.unwrap();
        let base = format!("/curator-peers/{test}");
        Self {
            addr,
            base,
            raw,
            peers,
        }
    }

    pub(crate) fn url(&self) -> String {
        let query = format!("layout=curator&ttl={}ms", TTL.as_millis());
        zk_url(&[self.addr], &self.base, &query)
    }

    pub(crate) async fn locker(&self) -> Locker {
        super::connect(&self.url()).await.unwrap()
    }

    /// A new peer process of the fleet's family.
    pub(crate) async fn peer(&self) -> RecipePeer {
        let peer = match self.peers {
            Peers::Curator => RecipePeer::curator(&self.addr.to_string(), TTL).await,
            Peers::Kazoo => RecipePeer::kazoo(&self.addr.to_string(), TTL).await,
        };
        peer.unwrap_or_else(|e| panic!("{e}"))
    }

    /// Where Curator keeps what distlock calls `key`.
    pub(crate) fn path(&self, key: &str) -> String {
        format!("{}/{key}", self.base)
    }

    /// Fails if `node` of `key` still exists: `what` happened while the
    /// holder's node lived.
    pub(crate) async fn assert_gone(&self, key: &str, node: &str, what: &str) {
        let path = format!("{}/{node}", self.path(key));
        let stat = self.raw.check_stat(&path).await.unwrap();
        assert!(stat.is_none(), "{what} while the holder's {path} lived");
    }

    /// Waits (on ZooKeeper's watches) until `dir` has `count` children
    /// whose names contain `marker`.
    pub(crate) async fn wait_for_nodes(&self, dir: &str, marker: &str, count: usize) {
        let waiting = async {
            loop {
                match self.raw.list_and_watch_children(dir).await {
                    Ok((children, watcher)) => {
                        if children.iter().filter(|c| c.contains(marker)).count() >= count {
                            return;
                        }
                        watcher.changed().await;
                    }
                    Err(zookeeper_client::Error::NoNode) => {
                        let (_, watcher) = self.raw.check_and_watch_stat(dir).await.unwrap();
                        watcher.changed().await;
                    }
                    Err(e) => panic!("list {dir}: {e}"),
                }
            }
        };
        timeout(SLACK * 2, waiting)
            .await
            .unwrap_or_else(|_| panic!("{dir} never had {count} {marker} nodes"));
    }
}

/// What the holders of a mixed run did: a counter each exclusive hold
/// increments with a read, a pause and a write; the read-write fencing
/// register every mutex and read-write hold presents its token to, at
/// its start and its end; and who was inside at once.
#[derive(Clone, Default)]
pub(crate) struct Ledger {
    pub(crate) counter: Arc<Mutex<u64>>,
    pub(crate) register: RwRegister,
    inside: Arc<Mutex<(usize, usize)>>,
    pub(crate) most: Arc<AtomicUsize>,
    violations: Arc<Mutex<Vec<String>>>,
}

impl Ledger {
    /// `who`'s hold of `kind` with `token`, lasting [`WORK`].
    pub(crate) async fn work(&self, who: &str, kind: Kind, token: u64) {
        let shared = kind == Kind::Read;
        let limit = match kind {
            Kind::Permit(limit) => limit as usize,
            _ => 1,
        };
        self.enter(who, shared, limit);
        let access = if shared { Access::Read } else { Access::Write };
        let fenced = !matches!(kind, Kind::Permit(_));
        if fenced {
            self.register.present(who, access, token);
        }
        let read = *self.counter.lock().unwrap();
        sleep(WORK).await; // the work between the read and the write
        if !shared {
            *self.counter.lock().unwrap() = read + 1;
        }
        if fenced {
            self.register.present(who, access, token);
        }
        let mut inside = self.inside.lock().unwrap();
        *if shared { &mut inside.0 } else { &mut inside.1 } -= 1;
    }

    /// A hold begins: `shared` ones may overlap each other, and at most
    /// `limit` holds of any kind may be inside at once.
    pub(crate) fn enter(&self, who: &str, shared: bool, limit: usize) {
        let mut inside = self.inside.lock().unwrap();
        let (readers, others) = *inside;
        let clash = if shared {
            others > 0
        } else {
            readers + others >= limit
        };
        if clash {
            let seen = format!("{who} entered beside {readers} shared and {others} other holds");
            self.violations.lock().unwrap().push(seen);
        }
        *inside = if shared {
            (readers + 1, others)
        } else {
            (readers, others + 1)
        };
        self.most.fetch_max(readers + others + 1, Ordering::SeqCst);
    }

    /// No hold overlapped another it may not, and the register refused
    /// nothing and saw no writer beside another hold.
    pub(crate) fn assert_safe(&self) {
        let violations = self.violations.lock().unwrap();
        assert!(violations.is_empty(), "holds overlapped: {violations:?}");
        assert_eq!(self.register.refused(), vec![], "accesses refused");
        self.register.exclusive().unwrap();
    }
}

/// Two peers and two distlock lockers on distlock's `key`, each
/// taking [`ROUNDS`] holds, the kind `plan(holder, round)` says; all must
/// be served within [`RUN_LIMIT`].
pub(crate) async fn mixed_run(fleet: &Fleet, key: &str, plan: fn(usize, usize) -> Kind) -> Ledger {
    let ledger = Ledger::default();
    let mut tasks = JoinSet::new();
    for i in 0..4 {
        let mut holder = match i % 2 {
            0 => Holder::Curator(fleet.peer().await, fleet.path(key)),
            _ => Holder::Distlock(fleet.locker().await, key.to_owned()),
        };
        let (ledger, side) = (ledger.clone(), ["peer", "distlock"][i % 2]);
        tasks.spawn(async move {
            for round in 0..ROUNDS {
                let kind = plan(i, round);
                let hold = holder.take(kind).await.unwrap();
                ledger.work(&format!("{side} {i}"), kind, hold.token).await;
                holder.release(hold).await.unwrap();
            }
        });
    }
    let all = async {
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    };
    timeout(RUN_LIMIT, all)
        .await
        .expect("some holders were never served");
    ledger
}
