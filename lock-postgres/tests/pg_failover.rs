//! What survives a lost reply and a failover, on servers of their own: an
//! acquire whose reply never came back leaves no entry behind (a plain
//! lock, a waiter queued behind a holder, a read lock, a permit; these
//! cases share one server and take turns on it); a primary
//! with a synchronous standby, killed and replaced by the promoted
//! standby, loses no granted lock and tokens keep rising; with an
//! asynchronous standby the same failover can lose a granted lock — two
//! holders at once, shown here as the documented risk.

mod common;

use common::{connect, raw, url_on};

use std::time::{Duration, Instant};

use distlock_testkit::pg_standby::{Replication, StreamingPair};
use distlock_testkit::postgres::PgServer;
use distlock_testkit::scenarios::lost_reply::{
    lost_reply, Acquisition, GiveUp, LostReply, LostReplyStore,
};
use distlock_testkit::{eventually, pause_group};
use lock_core::LockOptions;
use tokio::sync::{Mutex, OnceCell};
use tokio_postgres::Client;

/// The entry sequence and a key's entries, read from outside distlock.
struct PgRecords {
    raw: Client,
    namespace: String,
}

impl LostReplyStore for PgRecords {
    /// The entry sequence's last value: every acquire statement that
    /// inserts an entry moves it on.
    type Mark = i64;

    async fn mark(&self) -> i64 {
        self.raw
            .query_one("SELECT last_value FROM distlock.entries_id_seq", &[])
            .await
            .expect("read the entry sequence")
            .get(0)
    }

    async fn reached(&self, before: &i64) -> Result<(), String> {
        let now = tokio::time::timeout(Duration::from_millis(500), self.mark())
            .await
            .map_err(|_| "the server did not answer".to_owned())?;
        match now > *before {
            true => Ok(()),
            false => Err(format!("no entry inserted since {before}")),
        }
    }

    /// The key's entries of every kind (locks, readers, permits, waiters).
    async fn kept(&self, key: &str) -> usize {
        let row = self
            .raw
            .query_one(
                "SELECT count(*) FROM distlock.entries WHERE namespace = $1 AND key = $2",
                &[&self.namespace, &key],
            )
            .await
            .expect("count the key's entries");
        usize::try_from(row.get::<_, i64>(0)).unwrap()
    }
}

/// One lost-reply case at a time on [`lost_reply_server`]: each freezes
/// it.
static TURN: Mutex<()> = Mutex::const_new(());

/// The server the lost-reply cases share, started on first use and kept
/// for the process.
async fn lost_reply_server() -> &'static PgServer {
    static SERVER: OnceCell<&'static PgServer> = OnceCell::const_new();
    SERVER
        .get_or_init(|| async {
            let server = PgServer::start("pg-lost-acquire").await.unwrap();
            &*Box::leak(Box::new(server))
        })
        .await
}

/// The server froze with the acquire statement in flight: the caller gave
/// up (its response timeout), the server ran the insert once resumed, and
/// the withdrawal sent behind it on the same connection removed it. Runs
/// the scenario (see `distlock_testkit::scenarios::lost_reply`) for
/// `acquisition` in `namespace`.
async fn lost(acquisition: Acquisition, namespace: &str) {
    let _turn = TURN.lock().await;
    let server = lost_reply_server().await;
    let url = url_on(server, namespace, "ttl=30s&response_timeout=1s");
    let (a, b) = (connect(&url).await, connect(&url).await);
    let store = PgRecords {
        raw: raw(&server.url()).await,
        namespace: namespace.to_owned(),
    };
    let keys: Vec<String> = (0..6).map(|i| format!("k{i}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let plan = LostReply {
        acquisition,
        server,
        give_up: GiveUp::ResponseTimeout,
        freeze_after: None,
        warm_key: "warm",
        keys: &keys,
        reach_within: Duration::from_secs(3),
        clean_within: Some(Duration::from_secs(5)),
    };
    lost_reply(&plan, &store, &a, &b).await;
}

/// A late `try_lock` leaves no entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_was_lost_leaves_no_orphan_entry() {
    lost(Acquisition::Lock, "lost").await;
}

/// A late enqueue behind a holder leaves no waiting entry that would
/// hold once the holder leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_request_whose_reply_was_lost_leaves_no_phantom_waiter() {
    lost(Acquisition::QueuedLock, "lost_queued").await;
}

/// A late `try_read` leaves no read entry keeping writers out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_lock_whose_reply_was_lost_leaves_no_orphan_reader() {
    lost(Acquisition::Read, "lost_read").await;
}

/// A late `try_acquire` leaves no permit entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_whose_reply_was_lost_leaves_no_orphan_permit() {
    lost(Acquisition::Permit, "lost_permit").await;
}

/// Waits until the standby has replayed the store's layout.
async fn layout_replayed(standby: &PgServer) {
    eventually(
        Duration::from_secs(20),
        "the layout on the standby",
        || async {
            match standby
                .psql("SELECT to_regclass('distlock.entries') IS NOT NULL")
                .await?
                .as_str()
            {
                "t" => Ok(()),
                other => Err(format!("not yet: {other}")),
            }
        },
    )
    .await
    .unwrap();
}

/// With a synchronous standby, every granted lock is on it before its
/// holder hears "granted": after the primary is killed and the standby
/// promoted, the entry is there, its key stays held until the holder's
/// session ends, and the next token is above every earlier one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronous_standby_promoted_keeps_every_granted_lock() {
    let pair = StreamingPair::start(Replication::Synchronous)
        .await
        .unwrap();
    let a = connect(&url_on(&pair.primary, "sync", "ttl=6s")).await;
    for _ in 0..3 {
        a.lock("warm").await.unwrap().release().await.unwrap();
    }
    let guard = a.lock("k").await.unwrap();
    let held = i64::try_from(guard.token().get()).unwrap();
    pair.primary.kill().await.unwrap();
    let killed_at = Instant::now();
    pair.promote().await.unwrap();
    let standby = raw(&pair.standby.url()).await;
    let row = standby
        .query_one(
            "SELECT count(*) FROM distlock.entries WHERE id = $1",
            &[&held],
        )
        .await
        .unwrap();
    assert_eq!(
        row.get::<_, i64>(0),
        1,
        "the granted entry is not on the promoted standby"
    );
    let b = connect(&url_on(&pair.standby, "sync", "ttl=6s")).await;
    let next = b
        .lock_with("k", LockOptions::new().wait(Duration::from_secs(30)))
        .await
        .unwrap();
    // The holder's session ran out on the new primary's clock first.
    assert!(
        killed_at.elapsed() >= Duration::from_secs(3),
        "the lock was free at once"
    );
    let reason = guard.loss_signal().loss_reason();
    assert!(
        reason.is_some(),
        "the old holder was not told before the next one got in"
    );
    assert!(
        next.token().get() > guard.token().get(),
        "token {} after {held}",
        next.token()
    );
    next.release().await.unwrap();
}

/// With an asynchronous standby, a lock granted on the primary may not
/// have reached the standby when the primary dies: after the promotion,
/// another client takes the same lock while its first holder still
/// believes it holds. This is the documented risk of asynchronous
/// replication, shown so that the docs cannot drift from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asynchronous_standby_promoted_can_lose_a_granted_lock() {
    let pair = StreamingPair::start(Replication::Asynchronous)
        .await
        .unwrap();
    let a = connect(&url_on(&pair.primary, "async", "ttl=30s")).await;
    a.lock("warm").await.unwrap().release().await.unwrap();
    layout_replayed(&pair.standby).await;
    // The standby falls behind (the primary's WAL sender frozen: nothing
    // more leaves), the primary grants, then dies.
    let sender = pair
        .primary
        .psql("SELECT pid FROM pg_stat_replication")
        .await
        .unwrap();
    pause_group(sender.parse().unwrap()).await.unwrap();
    let guard = a.lock("k").await.unwrap();
    pair.primary.kill().await.unwrap();
    pair.promote().await.unwrap();
    let b = connect(&url_on(&pair.standby, "async", "ttl=30s")).await;
    let second = b.try_lock("k").await.unwrap();
    let second = second.expect("the lost lock was not free on the promoted standby");
    assert_eq!(
        guard.loss_signal().loss_reason(),
        None,
        "the first holder was told already: no overlap shown"
    );
    println!(
        "two holders after an asynchronous failover: tokens {} and {}",
        guard.token(),
        second.token()
    );
    second.release().await.unwrap();
}
