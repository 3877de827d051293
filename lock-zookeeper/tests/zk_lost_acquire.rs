//! Acquisitions whose reply never came (see
//! `distlock_testkit::scenarios::lost_reply`), on a server of this
//! binary's own: the server frozen, the caller giving up on it (its call
//! dropped after a second, well before the client library would declare
//! the connection lost), then the server resumed while the connection
//! and session still live, so it applies the create after the caller gave
//! up. For a plain lock, a read lock, a permit and a waiter queued behind
//! a holder, the node would stand for the session's whole life (as long
//! as the locker lives): it must be deleted (the abandoned call's
//! clean-up finds it by its guid), and the key free within seconds.
//!
//! (When the client library gives up first, it closes the connection, and
//! ZooKeeper drops the requests of a closed connection: nothing is
//! applied late. The caller's own deadline is the case that matters.)
//!
//! The cases take turns on the server ([`TURN`]): each freezes it.

mod common;

use std::time::Duration;

use common::connect;
use distlock_testkit::layout::zk_lock_dir;
use distlock_testkit::probe::tcp_answer;
use distlock_testkit::scenarios::lost_reply::{
    lost_reply, Acquisition, GiveUp, LostReply, LostReplyStore,
};
use distlock_testkit::zookeeper::{raw_client, standalone_spec, zk_url};
use distlock_testkit::{shared_server, Server};
use lock_core::Locker;
use tokio::sync::Mutex;

const BASE: &str = "/lost";

/// One case at a time on the server: each freezes it.
static TURN: Mutex<()> = Mutex::const_new(());

/// The server's last zxid, from `srvr`.
async fn zxid(server: &Server) -> u64 {
    let answer = tcp_answer(server.addr(), b"srvr").await.unwrap();
    let hex = answer
        .lines()
        .find_map(|line| line.strip_prefix("Zxid: 0x"))
        .expect("srvr shows the zxid");
    u64::from_str_radix(hex.trim(), 16).unwrap()
}

/// Runs the scenario for `acquisition` in a namespace of its own.
async fn lost(acquisition: Acquisition, namespace: &str) {
    let _turn = TURN.lock().await;
    let server = shared_server("zk-lost-reply", standalone_spec)
        .await
        .unwrap();
    // A 10 s session: the client library would give up on the frozen
    // server after 4 s; the caller gives up after 1 s.
    let query = format!("ttl=10s&connect_timeout=1s&namespace={namespace}");
    let url = zk_url(&[server.addr()], BASE, &query);
    let (a, b) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
    let store = ZkRecords {
        server,
        raw: raw_client(&[server.addr()]).await.unwrap(),
        locker: b.clone(),
    };
    // Sessions open and the key's directories made before the freeze (the
    // warm-up takes the key itself, as the case does). Nothing of the late
    // create may stay: the clean-up's delete follows it within moments.
    let plan = LostReply {
        acquisition,
        server,
        give_up: GiveUp::Deadline(Duration::from_secs(1)),
        freeze_after: None,
        warm_key: "k",
        keys: &["k"],
        reach_within: Duration::from_secs(10),
        clean_within: Some(Duration::from_secs(2)),
    };
    lost_reply(&plan, &store, &a, &b).await;
}

/// A late `try_lock` leaves no orphan node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_was_lost_leaves_no_orphan_node() {
    lost(Acquisition::Lock, "lost-acquire").await;
}

/// A late create that queues behind a holder leaves no node that would
/// hold once the holder leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_request_whose_reply_was_lost_leaves_no_phantom_waiter() {
    lost(Acquisition::QueuedLock, "lost-queued").await;
}

/// A late `try_read` leaves no reader's node keeping writers out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_lock_whose_reply_was_lost_leaves_no_orphan_reader() {
    lost(Acquisition::Read, "lost-read").await;
}

/// A late `try_acquire` leaves no permit node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_whose_reply_was_lost_leaves_no_orphan_permit() {
    lost(Acquisition::Permit, "lost-permit").await;
}

/// The server's zxid and a name's nodes, read from outside distlock.
struct ZkRecords {
    server: &'static Server,
    raw: zookeeper_client::Client,
    locker: Locker,
}

impl ZkRecords {
    /// The nodes in `dir` whose names start with one of `prefixes` (none
    /// when `dir` does not exist).
    async fn nodes(&self, dir: &str, prefixes: &[&str]) -> usize {
        match self.raw.list_children(dir).await {
            Ok(children) => children
                .iter()
                .filter(|child| prefixes.iter().any(|p| child.starts_with(p)))
                .count(),
            Err(zookeeper_client::Error::NoNode) => 0,
            Err(e) => panic!("list {dir}: {e}"),
        }
    }
}

impl LostReplyStore for ZkRecords {
    /// The last zxid.
    type Mark = u64;

    async fn mark(&self) -> u64 {
        zxid(self.server).await
    }

    /// A write since `before`: the server applied the create it had
    /// buffered (the clean-up's delete comes after it).
    async fn reached(&self, before: &u64) -> Result<(), String> {
        match zxid(self.server).await {
            now if now > *before => Ok(()),
            now => Err(format!("zxid {now}, {before} before the freeze")),
        }
    }

    /// The lock's contender and reader nodes and the semaphore's permit
    /// nodes of the key.
    async fn kept(&self, key: &str) -> usize {
        let locks = zk_lock_dir(BASE, &self.locker.name(key).unwrap());
        let permits = format!("{}/_permits", locks.trim_end_matches("/_locks"));
        self.nodes(&locks, &["lock-", "read-"]).await + self.nodes(&permits, &["permit-"]).await
    }
}
