//! Fencing enforced by PostgreSQL itself: an `UPDATE` that names the lock
//! and the token it holds under changes nothing once the lock is gone,
//! inside the application's own transaction, with no token column of its
//! own to keep:
//!
//! ```sql
//! UPDATE invoices SET total = total + 100, written_by = $1
//!  WHERE id = 1 AND distlock.holds('billing', 'invoices/2026-11', $1)
//! ```
//!
//! Here a holder writes while it holds the lock (one row updated); the
//! lock is then taken away (an operator's `force_release`; a holder frozen
//! past its ttl looks the same to the database), and the same write with
//! the old token updates nothing; the next holder's write goes through.
//!
//! Run it with `cargo run -p lock-postgres --example fenced_update --
//! postgres://user:password@host/db` (the user may create a table and the
//! store's schema there). With no URL it starts a throwaway server with
//! distlock's test kit, which needs PostgreSQL's programs
//! (`scripts/test.sh` installs them).

use std::error::Error;

use distlock_testkit::postgres::PgServer;
use distlock_testkit::with_query;
use lock_core::open::open_store;
use lock_postgres::PgStore;
use tokio_postgres::{Client, NoTls};

const NAMESPACE: &str = "billing";
const KEY: &str = "invoices/2026-11";

/// The write, fenced by the lock `KEY` in `NAMESPACE` held with `token`:
/// the number of rows it changed.
async fn fenced_update(db: &Client, token: i64) -> Result<u64, tokio_postgres::Error> {
    db.execute(
        "UPDATE invoices SET total = total + 100, written_by = $1 \
         WHERE id = 1 AND distlock.holds($2, $3, $1)",
        &[&token, &NAMESPACE, &KEY],
    )
    .await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let (url, _throwaway) = match std::env::args().nth(1) {
        Some(url) => (url, None),
        None => {
            let server = PgServer::start("fenced-update-example").await?;
            (server.url(), Some(server))
        }
    };
    let locks = open_store::<PgStore>(&with_query(&url, &format!("namespace={NAMESPACE}"))).await?;
    let (db, connection) = tokio_postgres::connect(&url, NoTls).await?;
    tokio::spawn(connection);
    db.batch_execute(
        "CREATE TABLE IF NOT EXISTS invoices (id int PRIMARY KEY, total bigint NOT NULL, \
         written_by bigint); \
         INSERT INTO invoices VALUES (1, 0, NULL) ON CONFLICT (id) DO UPDATE SET total = 0",
    )
    .await?;

    let guard = locks.lock(KEY).await?;
    let old = i64::try_from(guard.token().get())?;
    let written = fenced_update(&db, old).await?;
    println!("holding token {old}: {written} row updated");
    assert_eq!(written, 1);

    locks.force_release(KEY).await?;
    let refused = fenced_update(&db, old).await?;
    println!(
        "lock taken away, token {old} again: {refused} rows updated (refused by the database)"
    );
    assert_eq!(refused, 0);

    let next = locks.lock(KEY).await?;
    let new = i64::try_from(next.token().get())?;
    let written = fenced_update(&db, new).await?;
    println!("next holder, token {new}: {written} row updated");
    assert_eq!(written, 1);
    next.release().await?;

    let row = db
        .query_one("SELECT total, written_by FROM invoices WHERE id = 1", &[])
        .await?;
    let (total, by): (i64, i64) = (row.get(0), row.get(1));
    println!("total {total}, last written with token {by}");
    assert_eq!((total, by), (200, new));
    Ok(())
}
