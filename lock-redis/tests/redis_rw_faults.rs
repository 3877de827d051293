//! Read-write locks under faults on Redis (the testkit's
//! `scenarios::rw_faults`): a writer, then a reader, frozen (`SIGSTOP`)
//! past its lease in a child process is replaced by the other kind, told
//! it lost once resumed, and fenced off by the register; never a reader
//! beside a writer. On a single server, a cluster and a Sentinel group —
//! each the binary's shared one, for both of its cases.
//!
//! Redlock has no read-write locks, so it has no case here: `rwlock` is
//! `NotSupported` there (a quorum of independent masters keeps no single
//! line of waiters or count of readers), which
//! `redis_shared::redlock_has_no_read_locks_or_semaphores` pins.

mod common;

use std::time::Duration;

use common::{connect, raw_connection};
use distlock_testkit::redis::{
    shared_cluster_url, shared_redis_url, waiters_in_line, TEST_TIMEOUTS,
};
use distlock_testkit::redis_sentinel::shared_sentinel_group;
use distlock_testkit::scenarios::rw_faults::{
    child_holder, frozen_reader_is_replaced, frozen_writer_is_replaced, ChildRun, RwFaults, RwStore,
};
use distlock_testkit::with_query;
use lock_core::Locker;
use lock_redis::RedisStore;

/// Tells a child run of this binary what to hold: `MODE KEY URL`.
const CHILD_VAR: &str = "DISTLOCK_REDIS_RW_CHILD";
const TTL: Duration = Duration::from_secs(1);
/// Slack for scheduling on a busy 2-core machine.
const SLACK: Duration = Duration::from_secs(3);
/// Every loss a resumed holder may hear on Redis: its own validity timer
/// ran out while it was frozen, or a renewal found its hold gone.
const REASONS: &[&str] = &["ValidityExpired", "RenewalRefused"];

/// Not a test: the child holder of the cases below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of the read-write fault tests"]
async fn rw_child() {
    child_holder(CHILD_VAR, |url| async move { connect(&url).await.unwrap() }).await;
}

/// Where the locks are kept.
#[derive(Clone, Copy, Debug)]
enum Deployment {
    Single,
    Cluster,
    Sentinel,
}

/// A connection to the deployment from outside distlock.
enum Raw {
    Server(::redis::aio::MultiplexedConnection),
    Cluster(::redis::cluster_async::ClusterConnection),
}

/// A lock's line, read with a raw connection.
struct Line {
    raw: Raw,
    locker: Locker,
}

impl RwStore for Line {
    async fn waiting(&self, key: &str) -> Result<usize, String> {
        let name = self.locker.name(key).map_err(|e| e.to_string())?;
        let line = match &self.raw {
            Raw::Server(raw) => waiters_in_line(&mut raw.clone(), &name).await,
            Raw::Cluster(raw) => waiters_in_line(&mut raw.clone(), &name).await,
        };
        line.map(|owners| owners.len()).map_err(|e| e.to_string())
    }
}

/// The child's URL on `deployment` (leases of [`TTL`] in `namespace`),
/// two lockers on it and the line they share.
async fn set_up(deployment: Deployment, namespace: &str) -> (String, Vec<Locker>, Line) {
    let base = match deployment {
        Deployment::Single => shared_redis_url().await,
        Deployment::Cluster => shared_cluster_url().await,
        Deployment::Sentinel => shared_sentinel_group().await.map(|group| group.url()),
    };
    let query = format!(
        "ttl={}ms&namespace={namespace}&{TEST_TIMEOUTS}",
        TTL.as_millis()
    );
    let url = with_query(&base.unwrap(), &query);
    let lockers = vec![connect(&url).await.unwrap(), connect(&url).await.unwrap()];
    let raw = match deployment {
        Deployment::Single => Raw::Server(raw_connection(&shared_redis_url().await.unwrap()).await),
        Deployment::Cluster => {
            let config = lock_core::open::parse::<RedisStore>(&url).unwrap().config;
            Raw::Cluster(config.cluster_connection().await.unwrap())
        }
        Deployment::Sentinel => {
            let master = shared_sentinel_group().await.unwrap().master_addr().await;
            Raw::Server(raw_connection(&format!("redis://{}", master.unwrap())).await)
        }
    };
    let line = Line {
        raw,
        locker: lockers[0].clone(),
    };
    (url, lockers, line)
}

fn plan<'a>(url: &'a str, lockers: &'a [Locker]) -> RwFaults<'a> {
    RwFaults {
        lockers,
        child: ChildRun {
            test: "rw_child",
            var: CHILD_VAR,
            url,
        },
        // Renewed every third of the ttl: two thirds of it at least.
        lease_left: TTL / 2,
        within: TTL + SLACK,
        reasons: REASONS,
    }
}

async fn writer_case(deployment: Deployment) {
    let (url, lockers, line) = set_up(deployment, "rw-faults-writer").await;
    let seen = frozen_writer_is_replaced(&plan(&url, &lockers), &line, "frozen-writer").await;
    eprintln!("{deployment:?}: {seen:?}");
}

async fn reader_case(deployment: Deployment) {
    let (url, lockers, line) = set_up(deployment, "rw-faults-reader").await;
    let seen = frozen_reader_is_replaced(&plan(&url, &lockers), &line, "frozen-reader").await;
    eprintln!("{deployment:?}: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_writer_is_replaced_by_the_readers_behind_it() {
    writer_case(Deployment::Single).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_reader_is_replaced_by_the_writer_behind_it() {
    reader_case(Deployment::Single).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_frozen_writer_is_replaced_by_the_readers_behind_it() {
    writer_case(Deployment::Cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_frozen_reader_is_replaced_by_the_writer_behind_it() {
    reader_case(Deployment::Cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_a_frozen_writer_is_replaced_by_the_readers_behind_it() {
    writer_case(Deployment::Sentinel).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_a_frozen_reader_is_replaced_by_the_writer_behind_it() {
    reader_case(Deployment::Sentinel).await;
}
