//! What ZooKeeper keeps of names nobody holds: nothing, once the server
//! has reclaimed their directories. Every directory distlock creates (the
//! base path, the namespace, each key level, `_locks`, `_permits`) is a
//! container node, which the server deletes once it is empty; contender
//! nodes are ephemeral and deleted on release. So after 10,000 distinct
//! names are locked and released (plain locks, read locks, permits,
//! elections), the node count falls back to what it was before: nothing
//! is left under the base path, whose own node goes too.
//!
//! On a server of its own, whose node count is ours alone. The server
//! checks its containers every `znode.container.checkIntervalMs` (60 s by
//! default) and deletes at most `znode.container.maxPerMinute` (10,000)
//! of them a minute: reclaiming about 20,000 directories, a level of keys
//! per check, would take minutes. The test lowers both (a check every
//! 500 ms, no rate limit); what it waits for is the node count falling,
//! not a time.

mod common;

use std::time::Duration;

use distlock_testkit::eventually;
use distlock_testkit::workload::touch_names;
use distlock_testkit::zookeeper::{
    raw_client, srvr_number, start_standalone_with, zk_url, ZkSettings,
};
use zookeeper_client::Error as ZkError;

/// Distinct names taken and given back.
const NAMES: usize = 10_000;
/// Lockers (so sessions) the names are spread over.
const LOCKERS: usize = 8;
/// The base path of the lockers.
const BASE: &str = "/bounded";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_names_leave_nothing_once_containers_are_reclaimed() {
    let settings = ZkSettings::default()
        .property("znode.container.checkIntervalMs", 500)
        .property("znode.container.maxPerMinute", 6_000_000);
    let server = start_standalone_with(settings).await.unwrap();
    let addr = server.addr();
    let before = srvr_number(addr, "Node count").await.unwrap();
    let url = zk_url(&[addr], BASE, "namespace=bounded&ttl=10s");
    let mut lockers = Vec::new();
    for _ in 0..LOCKERS {
        lockers.push(common::connect(&url).await.unwrap());
    }

    // The most nodes seen while the names are in use (the server reclaims
    // directories meanwhile).
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let sampler = tokio::spawn(async move {
        let mut peak = 0;
        loop {
            peak = peak.max(srvr_number(addr, "Node count").await.unwrap_or(0));
            tokio::select! {
                _ = &mut stopped => return peak,
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    });
    let touched = touch_names(&lockers, "orders/", NAMES, 64).await.unwrap();
    assert_eq!(touched.total(), NAMES);
    assert!(touched.permits > 0 && touched.reads > 0 && touched.elections > 0);
    let _ = stop.send(());
    let peak = sampler.await.unwrap();

    // The bound: the node count before the names were used, the base
    // node included if it existed (it did not: it is reclaimed too).
    eventually(
        Duration::from_secs(120),
        "the directories reclaimed",
        || async {
            match srvr_number(addr, "Node count").await? {
                n if n <= before => Ok(()),
                n => Err(format!("{} nodes more than before", n - before)),
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e} (at most {peak} while the names were in use)"));
    let raw = raw_client(&[addr]).await.unwrap();
    assert_eq!(raw.list_children(BASE).await, Err(ZkError::NoNode));
    // The names did leave directories to reclaim: this measured something.
    assert!(
        peak > before + 100,
        "at most {peak} nodes while the names were in use, {before} before"
    );
}
