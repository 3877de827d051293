//! What etcd keeps of names nobody holds: nothing. After 10,000 distinct
//! names are locked and released (plain locks, read locks, permits with
//! their stored limits, elections), no key is left under the namespace's
//! prefix; the leases are one per locker whatever the number of names,
//! and none is left once the lockers are gone.
//!
//! On a member of its own: leases are counted cluster-wide.

mod common;
#[path = "common/servers.rs"]
mod servers;

use std::time::Duration;

use common::connect;
use distlock_testkit::etcd::{etcd_url, keys_under, raw_client};
use distlock_testkit::eventually;
use distlock_testkit::workload::touch_names;
use servers::{single_member, url_for};

/// Distinct names taken and given back.
const NAMES: usize = 10_000;
/// Lockers (so sessions, so leases) the names are spread over.
const LOCKERS: usize = 8;

/// Leases granted and not yet revoked or expired.
async fn leases(raw: &etcd_client::Client) -> usize {
    raw.lease_client().leases().await.unwrap().leases().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_names_leave_no_key_and_lockers_no_lease() {
    let server = single_member("etcd-bounded").await;
    let raw = raw_client(&etcd_url([server.addr()])).await.unwrap();
    let url = url_for([server.addr()], "10s", "bounded");
    let mut lockers = Vec::new();
    for _ in 0..LOCKERS {
        lockers.push(connect(&url).await.unwrap());
    }

    let touched = touch_names(&lockers, "orders/", NAMES, 64).await.unwrap();

    assert_eq!(touched.total(), NAMES);
    assert!(touched.permits > 0 && touched.reads > 0 && touched.elections > 0);
    let left = keys_under(&raw, "distlock/bounded/").await.unwrap();
    assert_eq!(left, 0, "{left} keys left after {touched:?}");
    // One lease per locker (each locker's sessions share one ttl).
    assert_eq!(leases(&raw).await, LOCKERS);
    drop(lockers);
    eventually(Duration::from_secs(10), "every lease revoked", || async {
        match leases(&raw).await {
            0 => Ok(()),
            n => Err(format!("{n} leases left")),
        }
    })
    .await
    .unwrap();
}
