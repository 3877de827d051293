//! Turning the client library's errors into [`LockError`]s.
//!
//! A lost or refused connection, a server shutting down, a cancelled
//! statement or a deadlock is [`LockError::Unavailable`] (retriable);
//! refused credentials or privileges are
//! [`LockError::PermissionDenied`]; a TLS handshake that rustls refuses
//! (a certificate it cannot verify) is [`LockError::InvalidConfig`]
//! naming why; anything else the server reports is
//! [`LockError::Backend`] with its SQLSTATE in the message. Messages name
//! what was tried, never a password (the library's errors carry none).

use deadpool_postgres::PoolError;
use lock_core::LockError;
use tokio_postgres::error::SqlState;

/// SQLSTATEs after which the same request may succeed later.
const TRANSIENT: [SqlState; 7] = [
    SqlState::ADMIN_SHUTDOWN,
    SqlState::CRASH_SHUTDOWN,
    SqlState::CANNOT_CONNECT_NOW,
    SqlState::QUERY_CANCELED,
    SqlState::T_R_DEADLOCK_DETECTED,
    SqlState::T_R_SERIALIZATION_FAILURE,
    SqlState::TOO_MANY_CONNECTIONS,
];

/// SQLSTATEs saying who we are may not do this.
const DENIED: [SqlState; 3] = [
    SqlState::INVALID_PASSWORD,
    SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
    SqlState::INSUFFICIENT_PRIVILEGE,
];

/// The [`LockError`] for `error`, met while doing `what`.
pub(crate) fn db_error(what: &str, error: tokio_postgres::Error) -> LockError {
    match error.code() {
        Some(code) if DENIED.contains(code) => LockError::permission_denied(what, error),
        Some(code) if TRANSIENT.contains(code) => unavailable(what, error),
        Some(code) => LockError::backend(format!("{what} (SQLSTATE {})", code.code()), error),
        // No server error: a TLS handshake refused, or the connection
        // failed or closed.
        None => match tls_refusal(&error) {
            Some(why) => LockError::invalid_config(format!(
                "{what}: the TLS handshake failed ({why}); check sslmode and tls_ca_file"
            )),
            None => unavailable(what, error),
        },
    }
}

/// What rustls refused in `error`'s handshake, if that is what failed: a
/// certificate or protocol problem retrying cannot fix.
fn tls_refusal(error: &tokio_postgres::Error) -> Option<String> {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let rustls = cause.downcast_ref::<rustls::Error>().or_else(|| {
            cause
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(refused) = rustls {
            return Some(refused.to_string());
        }
        source = cause.source();
    }
    None
}

/// [`LockError::Unavailable`] for `error`, met while doing `what`.
pub(crate) fn unavailable(what: &str, error: impl Into<lock_core::backend::BoxError>) -> LockError {
    LockError::unavailable(what, error)
}

/// The [`LockError`] for a connection the pool could not give.
pub(crate) fn pool_error(error: PoolError) -> LockError {
    match error {
        PoolError::Backend(error) => db_error("cannot connect to PostgreSQL", error),
        other => unavailable("no PostgreSQL connection available", other),
    }
}
