//! zookeeper-client errors → [`LockError`], in one place.

use lock_core::LockError;
use zookeeper_client::Error as ZkError;

/// Converts a client error from operation `what` (e.g. "create lock node
/// under /distlock/ns/k/_locks") into the lock API's error kinds:
///
/// * the connection or session failed → [`LockError::Unavailable`]
///   (retriable; a session that expired is replaced on the next call);
/// * the server refused our credentials or ACLs →
///   [`LockError::PermissionDenied`], saying which credentials to check;
/// * anything else → [`LockError::Backend`].
pub(crate) fn map(what: &str, error: ZkError) -> LockError {
    match error {
        ZkError::NoAuth => LockError::permission_denied(
            format!(
                "ZooKeeper refused to {what}: not authorized. Nodes created with digest \
                 credentials are only accessible with the same user:password; check the \
                 credentials in the lock URL"
            ),
            error,
        ),
        ZkError::AuthFailed => LockError::permission_denied(
            format!(
                "ZooKeeper authentication failed while trying to {what}; check the \
                 credentials in the lock URL"
            ),
            error,
        ),
        error if is_unavailable(&error) => {
            LockError::unavailable(format!("ZooKeeper could not {what}"), error)
        }
        error => LockError::backend(format!("ZooKeeper failed to {what}"), error),
    }
}

/// True for errors of the connection or session rather than of the
/// request: worth retrying once the session is connected (or replaced).
pub(crate) fn is_unavailable(error: &ZkError) -> bool {
    matches!(
        error,
        ZkError::ConnectionLoss
            | ZkError::Timeout
            | ZkError::NoHosts
            | ZkError::SessionExpired
            | ZkError::SessionMoved
            | ZkError::ClientClosed
            | ZkError::Throttled
            | ZkError::NotReadOnly
            // I/O errors of a broken connection arrive as `Custom`.
            | ZkError::Custom(_)
    )
}

/// True when a request may or may not have been applied: its connection
/// broke before the reply arrived.
pub(crate) fn outcome_unknown(error: &ZkError) -> bool {
    matches!(
        error,
        ZkError::ConnectionLoss | ZkError::Timeout | ZkError::Custom(_)
    )
}

/// The error for a call that found no usable session within `waited`.
pub(crate) fn disconnected(hosts: &str, waited: std::time::Duration) -> LockError {
    LockError::Unavailable {
        message: format!(
            "no connection to ZooKeeper at {hosts} within {}",
            humantime_ms(waited)
        ),
        source: None,
    }
}

fn humantime_ms(d: std::time::Duration) -> String {
    format!("{} ms", d.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_by_what_the_caller_can_do() {
        assert!(map("x", ZkError::ConnectionLoss).is_retriable());
        assert!(map("x", ZkError::SessionExpired).is_retriable());
        assert!(matches!(
            map("x", ZkError::NoAuth),
            LockError::PermissionDenied { .. }
        ));
        assert!(matches!(
            map("x", ZkError::AuthFailed),
            LockError::PermissionDenied { .. }
        ));
        assert!(matches!(
            map("x", ZkError::NodeExists),
            LockError::Backend { .. }
        ));
        let shown = map("delete /a", ZkError::NoAuth).to_string();
        assert!(
            shown.contains("not authorized") && shown.contains("delete /a"),
            "{shown}"
        );
        assert!(outcome_unknown(&ZkError::ConnectionLoss));
        assert!(!outcome_unknown(&ZkError::NoNode));
    }
}
