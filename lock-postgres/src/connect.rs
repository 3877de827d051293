//! Connections: the client library's settings from a [`PgConfig`], the
//! pool every statement goes through, and single connections outside it
//! (the LISTEN connection).
//!
//! TLS follows `sslmode` (see [`crate::tls`]): every connection is made
//! with the same rustls connector, which `disable` never uses.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use lock_core::LockError;
use tokio_postgres::config::TargetSessionAttrs;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Connection, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::{PgConfig, SslMode};
use crate::errors::{db_error, unavailable};
use crate::tls;

/// The stream of a connection made with the store's TLS connector.
pub(crate) type TlsStream = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream;

/// How many connections the pool keeps at most.
pub const POOL_SIZE: usize = 8;

/// The client library's settings for `config`.
pub(crate) fn client_config(config: &PgConfig) -> Result<tokio_postgres::Config, LockError> {
    let mut pg = tokio_postgres::Config::new();
    for host in &config.hosts {
        pg.host(&host.host);
        pg.port(host.port);
    }
    if config.hosts.len() > 1 {
        // Locks are written: find the primary among the hosts.
        pg.target_session_attrs(TargetSessionAttrs::ReadWrite);
    }
    let user = match &config.user {
        Some(user) => user.clone(),
        None => std::env::var("USER").map_err(|_| {
            LockError::invalid_config(
                "no PostgreSQL user given and $USER is not set: add user@ to the URL",
            )
        })?,
    };
    pg.user(&user);
    if let Some(password) = &config.password {
        pg.password(password.expose());
    }
    if let Some(dbname) = &config.dbname {
        pg.dbname(dbname);
    }
    pg.application_name(&config.application_name);
    pg.connect_timeout(config.connect_timeout);
    pg.ssl_mode(match config.sslmode {
        SslMode::Disable => tokio_postgres::config::SslMode::Disable,
        SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
            tokio_postgres::config::SslMode::Require
        }
    });
    Ok(pg)
}

/// The pool of `config`'s connections: at most [`POOL_SIZE`], each
/// connection attempt bounded by `connect_timeout`, a wait for a free one
/// by `response_timeout`. Connects lazily.
pub(crate) fn pool(config: &PgConfig) -> Result<Pool, LockError> {
    let manager = Manager::from_config(
        client_config(config)?,
        tls::connector(config)?,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(POOL_SIZE)
        .runtime(Runtime::Tokio1)
        .create_timeout(Some(config.connect_timeout))
        .wait_timeout(Some(config.response_timeout))
        .build()
        .map_err(|e| LockError::invalid_config(format!("cannot set up the connection pool: {e}")))
}

/// One connection outside the pool, whose [`Connection`] the caller
/// drives (to read its notifications).
pub(crate) async fn single(
    config: &PgConfig,
) -> Result<(Client, Connection<Socket, TlsStream>), LockError> {
    let pg = client_config(config)?;
    let attempt = tokio::time::timeout(
        config.connect_timeout + Duration::from_millis(100),
        pg.connect(tls::connector(config)?),
    );
    match attempt.await {
        Ok(Ok(pair)) => Ok(pair),
        Ok(Err(error)) => Err(db_error("cannot connect to PostgreSQL", error)),
        Err(elapsed) => Err(unavailable("cannot connect to PostgreSQL", elapsed)),
    }
}
