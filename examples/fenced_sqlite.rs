//! What fencing buys: a holder that paused past its lock (a GC pause, a
//! stalled VM, a slow disk) and resumes believing it still holds it must
//! not overwrite what the next holder wrote. The lock cannot stop it; the
//! database can, by refusing writes whose fencing token is not newer than
//! the last one it accepted:
//!
//! ```sql
//! UPDATE accounts SET balance = ?, last_token = ? WHERE id = ? AND last_token < ?
//! ```
//!
//! Here client A takes the lock and reads the balance, then stalls; its
//! lock ends (here A's guard is released for it, as a lease expiring
//! would); client B takes the lock with a newer token and writes; A
//! resumes and tries its write with its old token: SQLite updates no row,
//! and A learns that it lost.
//!
//! Run it with `cargo run --example fenced_sqlite` (SQLite is built in;
//! the database is a temporary file). `DISTLOCK_URL` picks another store.

use rusqlite::{params, Connection};

/// Writes `balance` for account `id` if `token` is newer than the last
/// accepted one; returns whether the write was accepted.
fn fenced_write(db: &Connection, id: i64, balance: i64, token: u64) -> rusqlite::Result<bool> {
    let token = i64::try_from(token).expect("tokens fit in SQLite's integers");
    let updated = db.execute(
        "UPDATE accounts SET balance = ?1, last_token = ?2 WHERE id = ?3 AND last_token < ?2",
        params![balance, token, id],
    )?;
    Ok(updated == 1)
}

fn balance(db: &Connection, id: i64) -> rusqlite::Result<i64> {
    db.query_row(
        "SELECT balance FROM accounts WHERE id = ?1",
        params![id],
        |row| row.get(0),
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Connection::open(dir.path().join("bank.db"))?;
    db.execute_batch(
        "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, \
         last_token INTEGER NOT NULL DEFAULT 0);
         INSERT INTO accounts (id, balance) VALUES (1, 100);",
    )?;
    let (a, b) = (
        distlock_examples::locker("fencing-example").await?,
        distlock_examples::locker("fencing-example").await?,
    );

    // A takes the lock and reads: it will add 10.
    let guard_a = a.lock("account-1").await?;
    let token_a = guard_a.token().get();
    let seen_by_a = balance(&db, 1)?;
    println!("A holds the lock with token {token_a} and reads balance {seen_by_a}");

    // A stalls; meanwhile its lock ends, as a lease does when its holder
    // stops renewing it.
    guard_a.release().await?;
    println!("A stalls; its lock ends");

    // B takes the lock and withdraws 30.
    let guard_b = b.lock("account-1").await?;
    let token_b = guard_b.token().get();
    let written = fenced_write(&db, 1, balance(&db, 1)? - 30, token_b)?;
    println!("B holds the lock with token {token_b}; its write accepted: {written}");
    guard_b.release().await?;

    // A resumes and writes what it computed before the stall.
    let stale = fenced_write(&db, 1, seen_by_a + 10, token_a)?;
    println!("A resumes and writes with token {token_a}; accepted: {stale}");

    let end = balance(&db, 1)?;
    println!(
        "balance: {end} (without the token check it would be {})",
        seen_by_a + 10
    );
    if stale || end != 70 {
        return Err("the stale write went through".into());
    }
    Ok(())
}
