//! Tests of the PostgreSQL harness on real servers: the shared server,
//! its password, PgBouncer in transaction mode, a kill and restart, and
//! streaming standbys promoted.

use std::time::Duration;

use distlock_testkit::eventually;
use distlock_testkit::pg_standby::{Replication, StreamingPair, STANDBY_NAME};
use distlock_testkit::pgbouncer::shared_pgbouncer;
use distlock_testkit::postgres::{pg_url, shared_postgres, shared_postgres_url, PgServer};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// Generous bound for replication to show a row on a busy 2-core box.
const REPLICATION_LIMIT: Duration = Duration::from_secs(30);

/// A client on `url`, its connection driven by a task of its own.
async fn connect(url: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// The first column of each row `sql` returns, in the simple query
/// protocol (the one PgBouncer's admin console speaks).
async fn column(client: &Client, sql: &str) -> Vec<String> {
    try_column(client, sql).await.unwrap()
}

/// [`column`], or the error.
async fn try_column(client: &Client, sql: &str) -> Result<Vec<String>, tokio_postgres::Error> {
    Ok(client
        .simple_query(sql)
        .await?
        .into_iter()
        .filter_map(|message| match message {
            SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_server_answers_a_query() {
    let client = connect(&shared_postgres_url().await.unwrap())
        .await
        .unwrap();
    let row = client.query_one("SELECT 1::int4", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 1);
    let fsync = column(&client, "SHOW fsync").await;
    assert_eq!(fsync, ["on"]);
    let max_connections = column(&client, "SHOW max_connections").await;
    assert_eq!(max_connections, ["100"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_refused() {
    let server = shared_postgres().await.unwrap();
    let wrong = pg_url(server.server().port(), "not-the-password");
    let err = connect(&wrong).await.unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::INVALID_PASSWORD), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbouncer_pools_by_transaction_and_answers() {
    let bouncer = shared_pgbouncer().await.unwrap();
    let client = connect(&bouncer.url()).await.unwrap();
    assert_eq!(column(&client, "SELECT 1").await, ["1"]);
    let admin = connect(&bouncer.admin_url()).await.unwrap();
    let config = admin.simple_query("SHOW CONFIG").await.unwrap();
    let pool_mode = config.iter().find_map(|message| match message {
        SimpleQueryMessage::Row(row) if row.get("key") == Some("pool_mode") => {
            row.get("value").map(str::to_owned)
        }
        _ => None,
    });
    assert_eq!(pool_mode.as_deref(), Some("transaction"));
    let wrong = pg_url(bouncer.server().port(), "not-the-password");
    assert!(
        connect(&wrong).await.is_err(),
        "the bouncer let a wrong password in"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_restarts_with_its_committed_rows() {
    let server = PgServer::start("postgres-restart").await.unwrap();
    let client = connect(&server.url()).await.unwrap();
    client
        .batch_execute("CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before the kill')")
        .await
        .unwrap();
    let port = server.server().port();
    server.kill().await.unwrap();
    assert!(
        connect(&server.url()).await.is_err(),
        "a killed server answered"
    );
    assert!(client.simple_query("SELECT 1").await.is_err());
    server.restart().await.unwrap();
    assert_eq!(server.server().port(), port);
    let client = connect(&server.url()).await.unwrap();
    assert_eq!(
        column(&client, "SELECT v FROM kept").await,
        ["before the kill"]
    );
}

/// A row written on the primary shows on the standby, which refuses
/// writes until promoted and takes them afterwards.
async fn standby_follows_then_takes_over(replication: Replication) {
    let pair = StreamingPair::start(replication).await.unwrap();
    let sync_state = pair
        .primary
        .psql(&format!(
            "SELECT sync_state FROM pg_stat_replication WHERE application_name = '{STANDBY_NAME}'"
        ))
        .await
        .unwrap();
    let expected = match replication {
        Replication::Synchronous => "sync",
        Replication::Asynchronous => "async",
    };
    assert_eq!(sync_state, expected);
    let primary = connect(&pair.primary.url()).await.unwrap();
    primary
        .batch_execute("CREATE TABLE t (v text); INSERT INTO t VALUES ('from the primary')")
        .await
        .unwrap();
    let standby = connect(&pair.standby.url()).await.unwrap();
    let reader = &standby;
    eventually(REPLICATION_LIMIT, "the row on the standby", || async move {
        match try_column(reader, "SELECT v FROM t").await {
            Ok(rows) if rows == ["from the primary"] => Ok(()),
            Ok(rows) => Err(format!("the standby has {rows:?}")),
            Err(e) => Err(e.to_string()),
        }
    })
    .await
    .unwrap();
    let refused = standby
        .batch_execute("INSERT INTO t VALUES ('x')")
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        Some(&SqlState::READ_ONLY_SQL_TRANSACTION),
        "{refused}"
    );
    pair.primary.kill().await.unwrap();
    pair.promote().await.unwrap();
    let promoted = connect(&pair.standby.url()).await.unwrap();
    promoted
        .batch_execute("INSERT INTO t VALUES ('after the promotion')")
        .await
        .unwrap();
    let rows = column(&promoted, "SELECT v FROM t ORDER BY v").await;
    assert_eq!(rows, ["after the promotion", "from the primary"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronous_standby_follows_and_is_promoted() {
    standby_follows_then_takes_over(Replication::Synchronous).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asynchronous_standby_follows_and_is_promoted() {
    standby_follows_then_takes_over(Replication::Asynchronous).await;
}
