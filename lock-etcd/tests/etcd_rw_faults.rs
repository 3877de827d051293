//! Read-write locks under faults on etcd (the testkit's
//! `scenarios::rw_faults`): a writer, then a reader, frozen (`SIGSTOP`)
//! past its session lease in a child process is replaced by the other
//! kind, told it lost once resumed, and fenced off by the register; never
//! a reader beside a writer. One member, the binary's shared one, for
//! every case.

mod common;

use std::time::Duration;

use common::connect;
use distlock_testkit::etcd::{keys_under, raw_client, shared_etcd_url, TEST_TIMEOUTS};
use distlock_testkit::layout::etcd_queue_prefix;
use distlock_testkit::scenarios::rw_faults::{
    child_holder, frozen_reader_is_replaced, frozen_writer_is_replaced, waiting_besides_holders,
    ChildRun, RwFaults, RwStore,
};
use distlock_testkit::with_query;
use lock_core::Locker;

/// Tells a child run of this binary what to hold: `MODE KEY URL`.
const CHILD_VAR: &str = "DISTLOCK_ETCD_RW_CHILD";
/// Slack for scheduling on a busy 2-core machine.
const SLACK: Duration = Duration::from_secs(3);

/// Not a test: the child holder of the cases below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of the read-write fault tests"]
async fn rw_child() {
    child_holder(CHILD_VAR, |url| async move { connect(&url).await.unwrap() }).await;
}

/// A lock's queue on the member, counted with a raw client.
struct Queue {
    raw: etcd_client::Client,
    locker: Locker,
}

impl RwStore for Queue {
    /// Every entry of the queue but the holders'.
    async fn waiting(&self, key: &str) -> Result<usize, String> {
        let name = self.locker.name(key).map_err(|e| e.to_string())?;
        let entries = keys_under(&self.raw, &etcd_queue_prefix(&name))
            .await
            .map_err(|e| e.to_string())?;
        let entries = usize::try_from(entries).map_err(|e| e.to_string())?;
        waiting_besides_holders(&self.locker, key, entries).await
    }
}

/// The child's URL (sessions of 2 s in `namespace`), two lockers on it
/// and the queue they share.
async fn set_up(namespace: &str) -> (String, Vec<Locker>, Queue) {
    let server = shared_etcd_url().await.unwrap();
    let url = with_query(
        &server,
        &format!("ttl=2s&namespace={namespace}&{TEST_TIMEOUTS}"),
    );
    let lockers = vec![connect(&url).await.unwrap(), connect(&url).await.unwrap()];
    let queue = Queue {
        raw: raw_client(&server).await.unwrap(),
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
        // A 2 s lease kept alive every third of it.
        lease_left: Duration::from_millis(1200),
        within: Duration::from_secs(2) + SLACK,
        // The resumed child's keepalive finds its lease gone.
        reasons: &["SessionExpired"],
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
