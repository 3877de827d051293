//! Read-write locks under faults on ZooKeeper (the testkit's
//! `scenarios::rw_faults`): a writer, then a reader, frozen (`SIGSTOP`)
//! past its session timeout in a child process is replaced by the other
//! kind, told it lost once resumed, and fenced off by the register; never
//! a reader beside a writer. One server, the binary's shared standalone
//! one, for every case.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{connect, SLACK};
use distlock_testkit::layout::zk_lock_dir;
use distlock_testkit::scenarios::rw_faults::{
    child_holder, frozen_reader_is_replaced, frozen_writer_is_replaced, waiting_besides_holders,
    ChildRun, RwFaults, RwStore,
};
use distlock_testkit::zookeeper::{raw_client, shared_standalone, zk_url};
use lock_core::Locker;

/// Tells a child run of this binary what to hold: `MODE KEY URL`.
const CHILD_VAR: &str = "DISTLOCK_ZK_RW_CHILD";
/// The base path of these tests' locks.
const BASE: &str = "/rw-faults";
/// The session timeout.
const TTL: Duration = Duration::from_secs(2);

/// Not a test: the child holder of the cases below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of the read-write fault tests"]
async fn rw_child() {
    child_holder(CHILD_VAR, |url| async move { connect(&url).await.unwrap() }).await;
}

/// A lock's queue of nodes on the server, listed with a raw session.
struct Queue {
    raw: zookeeper_client::Client,
    locker: Locker,
}

impl RwStore for Queue {
    /// Every reader's (`read-`) and exclusive (`lock-`) node of the
    /// lock's directory but the holders'.
    async fn waiting(&self, key: &str) -> Result<usize, String> {
        let name = self.locker.name(key).map_err(|e| e.to_string())?;
        let dir = zk_lock_dir(BASE, &name);
        let children = self.raw.list_children(&dir).await.unwrap_or_default();
        let queued = children
            .iter()
            .filter(|node| node.starts_with("lock-") || node.starts_with("read-"))
            .count();
        waiting_besides_holders(&self.locker, key, queued).await
    }
}

/// The child's URL (sessions of [`TTL`] in `namespace`), two lockers on
/// it and the queue they share.
async fn set_up(namespace: &str) -> (String, Vec<Locker>, Queue) {
    let addrs: Vec<SocketAddr> = shared_standalone().await.unwrap_or_else(|e| panic!("{e}"));
    let query = format!("ttl={}ms&namespace={namespace}", TTL.as_millis());
    let url = zk_url(&addrs, BASE, &query);
    let lockers = vec![connect(&url).await.unwrap(), connect(&url).await.unwrap()];
    let queue = Queue {
        raw: raw_client(&addrs).await.unwrap(),
        locker: lockers[0].clone(),
    };
    (url, lockers, queue)
}

fn plan<'a>(url: &'a str, lockers: &'a [Locker]) -> RwFaults<'a> {
    RwFaults {
        lockers,
        child: ChildRun {
            test: "rw_child",
            var: CHILD_VAR,
            url,
        },
        // The server counts from its last word with the child (a ping
        // at most 3/20 of the timeout before the freeze).
        lease_left: TTL / 2,
        within: TTL + SLACK,
        // The resumed child hears its session expired, or its validity
        // (the timeout since its last answer) ran out first.
        reasons: &["SessionExpired", "ValidityExpired"],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_writer_is_replaced_by_the_readers_behind_it() {
    let (url, lockers, queue) = set_up("rw-faults-writer").await;
    let seen = frozen_writer_is_replaced(&plan(&url, &lockers), &queue, "frozen-writer").await;
    eprintln!("{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_reader_is_replaced_by_the_writer_behind_it() {
    let (url, lockers, queue) = set_up("rw-faults-reader").await;
    let seen = frozen_reader_is_replaced(&plan(&url, &lockers), &queue, "frozen-reader").await;
    eprintln!("{seen:?}");
}
