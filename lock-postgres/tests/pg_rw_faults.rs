//! Read-write locks under faults on PostgreSQL (the testkit's
//! `scenarios::rw_faults`): a writer, then a reader, frozen (`SIGSTOP`)
//! past its session's ttl in a child process is replaced by the other
//! kind, told it lost once resumed, and fenced off by the register; never
//! a reader beside a writer. One server, the binary's shared one, for
//! every case.

mod common;

use std::time::Duration;

use common::{connect, pg_url, pg_url_with, raw};
use distlock_testkit::scenarios::rw_faults::{
    child_holder, frozen_reader_is_replaced, frozen_writer_is_replaced, ChildRun, RwFaults, RwStore,
};
use lock_core::Locker;
use tokio_postgres::Client;

/// Tells a child run of this binary what to hold: `MODE KEY URL`.
const CHILD_VAR: &str = "DISTLOCK_PG_RW_CHILD";
/// Slack for scheduling on a busy 2-core machine.
const SLACK: Duration = Duration::from_secs(3);

/// Not a test: the child holder of the cases below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of the read-write fault tests"]
async fn rw_child() {
    child_holder(CHILD_VAR, |url| async move { connect(&url).await }).await;
}

/// A lock's entries on the server, read with a plain client.
struct Entries {
    raw: Client,
    namespace: String,
}

impl RwStore for Entries {
    /// The key's live read and exclusive entries that do not hold, by
    /// the database's own `holds()`.
    async fn waiting(&self, key: &str) -> Result<usize, String> {
        let row = self
            .raw
            .query_one(
                "SELECT count(*) FROM distlock.entries e \
                 JOIN distlock.sessions s ON s.id = e.session_id \
                 WHERE e.namespace = $1 AND e.key = $2 AND e.kind <> 'permit' \
                 AND s.expires_at > now() AND NOT distlock.holds($1, $2, e.id)",
                &[&self.namespace, &key],
            )
            .await
            .map_err(|e| e.to_string())?;
        usize::try_from(row.get::<_, i64>(0)).map_err(|e| e.to_string())
    }
}

/// The child's URL (sessions of 2 s in `namespace`), two lockers on it
/// and the entries they share.
async fn set_up(namespace: &str) -> (String, Vec<Locker>, Entries) {
    let url = pg_url_with(&format!("namespace={namespace}&ttl=2s")).await;
    let lockers = vec![connect(&url).await, connect(&url).await];
    let entries = Entries {
        raw: raw(&pg_url().await).await,
        namespace: namespace.to_owned(),
    };
    (url, lockers, entries)
}

fn plan<'a>(url: &'a str, lockers: &'a [Locker]) -> RwFaults<'a> {
    RwFaults {
        lockers,
        child: ChildRun {
            test: "rw_child",
            var: CHILD_VAR,
            url,
        },
        // A 2 s session renewed every third of it.
        lease_left: Duration::from_millis(1200),
        within: Duration::from_secs(2) + SLACK,
        // The resumed child's renewal finds its session expired.
        reasons: &["SessionExpired"],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_writer_is_replaced_by_the_readers_behind_it() {
    let (url, lockers, entries) = set_up("rw_faults_writer").await;
    let seen = frozen_writer_is_replaced(&plan(&url, &lockers), &entries, "frozen-writer").await;
    eprintln!("{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_reader_is_replaced_by_the_writer_behind_it() {
    let (url, lockers, entries) = set_up("rw_faults_reader").await;
    let seen = frozen_reader_is_replaced(&plan(&url, &lockers), &entries, "frozen-reader").await;
    eprintln!("{seen:?}");
}
