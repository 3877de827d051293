//! An acquisition whose reply never came: the server frozen, the caller
//! giving up on it (its call dropped after a second, well before the
//! client library would declare the connection lost), then the server
//! resumed while the connection and session still live, so it applies the
//! create after the caller gave up. The node would hold the lock for the
//! session's whole life (as long as the locker lives): it must be deleted,
//! and the key free within seconds.
//!
//! (When the client library gives up first, it closes the connection, and
//! ZooKeeper drops the requests of a closed connection: nothing is
//! applied late. The caller's own deadline is the case that matters.)

mod common;

use std::time::Duration;

use common::connect;
use distlock_testkit::layout::{zk_contenders, zk_lock_dir};
use distlock_testkit::probe::tcp_answer;
use distlock_testkit::scenarios::lost_reply::{lost_reply, GiveUp, LostReply, LostReplyStore};
use distlock_testkit::zookeeper::{raw_client, standalone_spec, zk_url};
use distlock_testkit::Server;
use lock_core::Locker;

const BASE: &str = "/lost";

/// The server's last zxid, from `srvr`.
async fn zxid(server: &Server) -> u64 {
    let answer = tcp_answer(server.addr(), b"srvr").await.unwrap();
    let hex = answer
        .lines()
        .find_map(|line| line.strip_prefix("Zxid: 0x"))
        .expect("srvr shows the zxid");
    u64::from_str_radix(hex.trim(), 16).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_was_lost_leaves_no_orphan_node() {
    let server = standalone_spec().unwrap().start().await.unwrap();
    // A 10 s session: the client library would give up on the frozen
    // server after 4 s; the caller gives up after 1 s.
    let url = zk_url(&[server.addr()], BASE, "ttl=10s&connect_timeout=1s");
    let (a, b) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
    let store = ZkRecords {
        server: &server,
        raw: raw_client(&[server.addr()]).await.unwrap(),
        locker: b.clone(),
    };
    // Sessions open and the lock's directory made before the freeze (the
    // warm-up takes the key itself). Nothing of the late create may stay:
    // the key is free at once.
    let plan = LostReply {
        server: &server,
        give_up: GiveUp::Deadline(Duration::from_secs(1)),
        warm_key: "k",
        keys: &["k"],
        reach_within: Duration::from_secs(10),
        clean_within: None,
    };
    lost_reply(&plan, &store, &a, &b).await;
}

/// The server's zxid and a lock's contender nodes, read from outside
/// distlock.
struct ZkRecords<'a> {
    server: &'a Server,
    raw: zookeeper_client::Client,
    locker: Locker,
}

impl LostReplyStore for ZkRecords<'_> {
    /// The last zxid.
    type Mark = u64;

    async fn mark(&self) -> u64 {
        zxid(self.server).await
    }

    /// Two writes since `before`: the server applies the create it had
    /// buffered, and the abandoned call's clean-up deletes the node.
    async fn reached(&self, before: &u64) -> Result<(), String> {
        match zxid(self.server).await {
            now if now >= before + 2 => Ok(()),
            now => Err(format!("zxid {now}, {before} before the freeze")),
        }
    }

    /// The contender nodes in the key's lock directory.
    async fn kept(&self, key: &str) -> usize {
        let dir = zk_lock_dir(BASE, &self.locker.name(key).unwrap());
        let children = self.raw.list_children(&dir).await.unwrap();
        zk_contenders(&children).len()
    }
}
