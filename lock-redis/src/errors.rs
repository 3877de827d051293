//! Client errors as [`LockError`]s: which are retriable, which are refused
//! credentials or permissions, in plain words and without credentials.

use lock_core::LockError;
use redis::RedisError;

/// Maps a client error: network trouble, timeouts and a server that is
/// loading, failing over, down or (no longer) a replica are `Unavailable`
/// (retriable); refused credentials or permissions are `PermissionDenied`
/// (the credentials or the user's ACL must change); the rest is
/// `Backend`. Messages say the cause in plain words; client errors carry
/// no credentials.
pub(crate) fn map_error(what: &str, error: RedisError) -> LockError {
    use redis::{ErrorKind, ServerErrorKind};
    let unavailable = error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || matches!(
            error.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(
                    ServerErrorKind::BusyLoading
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::ReadOnly
                        | ServerErrorKind::Moved
                        | ServerErrorKind::Ask
                )
        );
    let message = format!("{what}: {}", in_words(&error));
    if unavailable {
        LockError::unavailable(message, error)
    } else if matches!(error.kind(), ErrorKind::AuthenticationFailed)
        || matches!(error.code(), Some("WRONGPASS" | "NOAUTH"))
    {
        LockError::permission_denied(
            format!(
                "{message} (the server refused the user name or password: check them in the URL)"
            ),
            error,
        )
    } else if error.code() == Some("NOPERM") || denied_inside_a_script(&error) {
        LockError::permission_denied(
            format!(
                "{message} (the user's ACL does not allow what the lock needs: grant the \
                 commands and key patterns the lock-redis README lists)"
            ),
            error,
        )
    } else {
        LockError::backend(message, error)
    }
}

/// A client error in plain words: an I/O error by its kind ("connection
/// refused"), anything else as the client says it.
fn in_words(error: &RedisError) -> String {
    match error.is_io_error() {
        true => {
            lock_core::backend::diagnose::root_cause(error).unwrap_or_else(|| error.to_string())
        }
        false => error.to_string(),
    }
}

/// A command of one of our scripts refused by the user's ACL: Redis says
/// so in the script's error, without the NOPERM code.
fn denied_inside_a_script(error: &RedisError) -> bool {
    error
        .to_string()
        .contains("user executing the script can't run this command")
}
