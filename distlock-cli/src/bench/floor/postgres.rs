//! The PostgreSQL floor: the durable work of one lock+release with none of
//! distlock's machinery (no session row, no queue read, no LISTEN, no
//! function): `INSERT … ON CONFLICT DO NOTHING RETURNING id` of one row
//! and the `DELETE` of that row, two autocommit statements, so two
//! commits flushed to the WAL as the server's settings say, on a plain
//! table of the floor's own (`distlock_floor.holds`, one row per held
//! name, unique by namespace and key). Beside it, the advisory-lock pair
//! (`pg_advisory_lock` + `pg_advisory_unlock` on one connection): what a
//! lock costs when it lives in one connection and nothing is written,
//! which is why the store does not use it (see the lock-postgres README).
//!
//! The floor connects with the URL's hosts, user, password, database,
//! `application_name` and `connect_timeout`, and bounds each statement by
//! `response_timeout`, without TLS: a URL whose `sslmode` requires TLS is
//! refused with a message saying so. Its table stays, empty, after the
//! run; `clean_up` deletes the rows of the run's namespace.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use distlock::postgres::{PgConfig, PgStore, SslMode};
use distlock::{LockError, LockName};
use tokio_postgres::config::TargetSessionAttrs;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls, Row};

use super::{taken, Floor, FloorProbe};

/// The advisory lock the table is created under, so that the throughput
/// test's clients, opening their floors at once, create it once
/// (`distlflr` in ASCII; the store's own is another).
const SETUP_LOCK: i64 = 0x6469_7374_6c66_6c72;

/// Creates the floor's schema and table if missing.
fn setup_sql() -> String {
    format!(
        "BEGIN;
SELECT pg_advisory_xact_lock({SETUP_LOCK});
CREATE SCHEMA IF NOT EXISTS distlock_floor;
CREATE TABLE IF NOT EXISTS distlock_floor.holds (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace text NOT NULL,
    key text NOT NULL,
    UNIQUE (namespace, key)
);
COMMIT;"
    )
}

const TAKE: &str = "INSERT INTO distlock_floor.holds (namespace, key) VALUES ($1, $2) \
                    ON CONFLICT DO NOTHING RETURNING id";
const GIVE_BACK: &str = "DELETE FROM distlock_floor.holds WHERE id = $1";
const READ: &str = "SELECT id FROM distlock_floor.holds WHERE namespace = $1 AND key = $2";
const ADVISORY_LOCK: &str = "SELECT pg_advisory_lock(hashtextextended($1, 0))";
const ADVISORY_UNLOCK: &str = "SELECT pg_advisory_unlock(hashtextextended($1, 0))";
const CLEAN_UP: &str = "DELETE FROM distlock_floor.holds WHERE namespace = $1";

/// The floor of a `postgres://` or `postgresql://` URL, on a connection
/// of its own.
pub(super) async fn open(url: &str) -> Result<Floor, LockError> {
    let config = lock_core::open::parse::<PgStore>(url)?.config;
    let client = connect(&config).await?;
    let floor = PgFloor {
        client,
        limit: config.response_timeout,
    };
    let setup = setup_sql();
    floor
        .bounded(
            "create the floor's table",
            floor.client.batch_execute(&setup),
        )
        .await?;
    Ok(Box::new(floor))
}

/// The client library's settings from the store's config, and a
/// connection with them.
async fn connect(config: &PgConfig) -> Result<Client, LockError> {
    let mut pg = tokio_postgres::Config::new();
    for host in &config.hosts {
        pg.host(&host.host).port(host.port);
    }
    if config.hosts.len() > 1 {
        pg.target_session_attrs(TargetSessionAttrs::ReadWrite);
    }
    let user = match &config.user {
        Some(user) => user.clone(),
        None => std::env::var("USER").map_err(|_| {
            LockError::invalid_config("floor probe: no PostgreSQL user given and $USER is not set")
        })?,
    };
    pg.user(&user)
        .application_name(&config.application_name)
        .connect_timeout(config.connect_timeout);
    if let Some(password) = &config.password {
        pg.password(password.expose());
    }
    if let Some(dbname) = &config.dbname {
        pg.dbname(dbname);
    }
    pg.ssl_mode(match config.sslmode {
        SslMode::Disable => tokio_postgres::config::SslMode::Disable,
        SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        _ => {
            return Err(LockError::invalid_config(
                "the PostgreSQL floor connects without TLS: bench this server with \
                 sslmode=prefer or sslmode=disable",
            ))
        }
    });
    let (client, connection) = tokio::time::timeout(config.connect_timeout, pg.connect(NoTls))
        .await
        .map_err(|_| {
            LockError::unavailable(
                format!(
                    "floor probe: no PostgreSQL connection within {:?}",
                    config.connect_timeout
                ),
                "timed out",
            )
        })?
        .map_err(|e| error("floor probe: connect", e))?;
    tokio::spawn(connection);
    Ok(client)
}

struct PgFloor {
    client: Client,
    /// The store's bound on one statement.
    limit: Duration,
}

impl PgFloor {
    /// Runs `call` within the store's bound for one statement.
    async fn bounded<T>(
        &self,
        what: &str,
        call: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, LockError> {
        match tokio::time::timeout(self.limit, call).await {
            Ok(result) => result.map_err(|e| error(&format!("floor probe: {what}"), e)),
            Err(_) => Err(LockError::Unavailable {
                message: format!("floor probe: {what}: no reply within {:?}", self.limit),
                source: None,
            }),
        }
    }

    /// One statement with text parameters, as the store sends them (an
    /// unnamed statement with its parameter types: one round trip).
    async fn query(&self, what: &str, sql: &str, texts: &[&str]) -> Result<Vec<Row>, LockError> {
        let params: Vec<(&(dyn ToSql + Sync), Type)> = texts
            .iter()
            .map(|text| (text as &(dyn ToSql + Sync), Type::TEXT))
            .collect();
        self.bounded(what, self.client.query_typed(sql, &params))
            .await
    }
}

impl fmt::Debug for PgFloor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgFloor").finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl FloorProbe for PgFloor {
    fn describe(&self) -> String {
        "INSERT … RETURNING id + DELETE: 2 autocommit statements on a table".to_owned()
    }

    async fn lock_release_once(&self, name: &LockName) -> Result<(), LockError> {
        let (namespace, key) = (name.namespace().as_str(), name.key().as_str());
        let taken_row = self.query("insert", TAKE, &[namespace, key]).await?;
        let Some(row) = taken_row.first() else {
            return Err(taken(format_args!("row `{namespace}/{key}`")));
        };
        let id: i64 = row.get(0);
        self.bounded(
            "delete",
            self.client.query_typed(GIVE_BACK, &[(&id, Type::INT8)]),
        )
        .await?;
        Ok(())
    }

    async fn clean_up(&self, namespace: &str) -> Result<(), LockError> {
        self.query("delete the run's rows", CLEAN_UP, &[namespace])
            .await
            .map(drop)
    }

    fn describe_round_trip(&self) -> String {
        "SELECT of one row: 1 statement".to_owned()
    }

    async fn round_trip_once(&self, name: &LockName) -> Result<(), LockError> {
        let (namespace, key) = (name.namespace().as_str(), name.key().as_str());
        self.query("select", READ, &[namespace, key])
            .await
            .map(drop)
    }

    fn describe_beside(&self) -> Option<String> {
        Some(
            "pg_advisory_lock + pg_advisory_unlock: 2 statements on one connection, \
             nothing written"
                .to_owned(),
        )
    }

    async fn beside_once(&self, name: &LockName) -> Result<(), LockError> {
        let id = format!("{}/{}", name.namespace(), name.key());
        self.query("advisory lock", ADVISORY_LOCK, &[&id]).await?;
        self.query("advisory unlock", ADVISORY_UNLOCK, &[&id])
            .await
            .map(drop)
    }
}

/// A lost or refused connection is `Unavailable`, the rest `Backend`.
fn error(what: &str, error: tokio_postgres::Error) -> LockError {
    let message = format!("{what}: {error}");
    if error.is_closed() || error.as_db_error().is_none() {
        LockError::unavailable(message, error)
    } else {
        LockError::backend(message, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_url_requiring_tls_is_refused_naming_why() {
        let error = open("postgres://u@127.0.0.1:1/db?sslmode=require")
            .await
            .unwrap_err();
        assert!(error.to_string().contains("without TLS"), "{error}");
    }
}
