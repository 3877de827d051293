//! Exit codes, and turning errors into them with a one-line message.
//!
//! | code | meaning |
//! |---|---|
//! | CMD's | `run`, `elect`: CMD's own exit code; 128+N if CMD died of signal N |
//! | 0 | success (`status` whether or not the lock is held, `leader` whether or not someone leads; `leader --watch` ended by a signal) |
//! | 1 | any other error; `check`: a case failed |
//! | 2 | bad usage or configuration: arguments, key, value, URL, option; the URL points at a server that is not the store, or its TLS settings cannot work |
//! | 69 | the store is unavailable: refused, no answer, down (`EX_UNAVAILABLE`) |
//! | 75 | `run`, `elect`: the lock or leadership was not had within `--wait` (`EX_TEMPFAIL`) |
//! | 76 | `run`, `elect`: the lock or leadership was lost while CMD ran |
//! | 77 | permission denied: the store refused the credentials or the ACL denies what the lock needs; the lock directory is not writable (`EX_NOPERM`) |
//! | 126 | `run`, `elect`: CMD exists but could not be started |
//! | 127 | `run`, `elect`: CMD was not found |
//! | 128+N | distlock itself was interrupted by signal N while waiting for the lock or leadership |

use std::error::Error;
use std::fmt;

use distlock::LockError;
use lock_core::backend::diagnose::root_cause;

/// Success.
pub const SUCCESS: i32 = 0;
/// Any error without a more specific code.
pub const FAILURE: i32 = 1;
/// Bad usage or configuration: arguments, key, value, URL or option, a
/// URL that points at another kind of server, TLS settings that cannot
/// work (also clap's code).
pub const USAGE: i32 = 2;
/// The store could not be reached: refused, no answer, down
/// (`EX_UNAVAILABLE` of sysexits.h).
pub const UNAVAILABLE: i32 = 69;
/// The lock (or leadership) was not had within `--wait` (`EX_TEMPFAIL`).
pub const TEMPFAIL: i32 = 75;
/// The lock (or leadership) was lost while CMD ran.
pub const LOST: i32 = 76;
/// Permission denied: refused credentials, an ACL that denies what the
/// lock needs, an unwritable lock directory (`EX_NOPERM` of sysexits.h).
pub const NOPERM: i32 = 77;
/// CMD was found but could not be started (as in POSIX shells).
pub const CANNOT_EXECUTE: i32 = 126;
/// CMD was not found (as in POSIX shells).
pub const NOT_FOUND: i32 = 127;
/// Added to a signal number for "died of that signal" (as in POSIX shells).
pub const SIGNAL_BASE: i32 = 128;

/// A command that ends with an error: the exit code and what to tell the
/// user (one line, without the `distlock: ` prefix; empty for nothing).
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: i32,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(USAGE, message)
    }

    pub(crate) fn other(message: impl Into<String>) -> Self {
        Self::new(FAILURE, message)
    }

    /// Ends with `code` and prints nothing (stdout went away, say).
    pub(crate) fn silent(code: i32) -> Self {
        Self::new(code, "")
    }
}

impl From<LockError> for Failure {
    fn from(error: LockError) -> Self {
        Self::new(code_for(&error), describe(&error))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The exit code for a lock error.
pub(crate) fn code_for(error: &LockError) -> i32 {
    match error {
        LockError::InvalidKey { .. }
        | LockError::InvalidValue { .. }
        | LockError::InvalidLimit { .. }
        | LockError::LimitMismatch { .. }
        | LockError::InvalidConfig { .. } => USAGE,
        LockError::Timeout { .. } => TEMPFAIL,
        LockError::Lost { .. } => LOST,
        LockError::Unavailable { .. } => UNAVAILABLE,
        LockError::PermissionDenied { .. } => NOPERM,
        _ => FAILURE,
    }
}

/// An error on one line: its own message, and its root cause in plain
/// words (see [`root_cause`]) when the message does not already say it.
/// The cause matters where the message is general ("ZooKeeper could not
/// open a session"); the sources between are a client library's layers,
/// whose texts are often dumps of its internals, and are left out.
pub(crate) fn describe(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    if let Some(cause) = root_cause(error) {
        if !text.to_lowercase().contains(&cause.to_lowercase()) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    one_line(&text)
}

/// `text` with line breaks (multi-line assertion messages, server replies)
/// folded, so every message stays one line on a terminal and in logs.
pub(crate) fn one_line(text: &str) -> String {
    text.split(['\n', '\r'])
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn lock_errors_map_to_their_exit_codes() {
        let cases = [
            (LockError::invalid_key("key is empty"), USAGE),
            (LockError::invalid_config("bad"), USAGE),
            (
                LockError::InvalidValue {
                    reason: "too long".into(),
                },
                USAGE,
            ),
            (
                LockError::Timeout {
                    key: "k".into(),
                    waited: Duration::from_secs(1),
                },
                TEMPFAIL,
            ),
            (LockError::lost("k", distlock::LossReason::TakenAway), LOST),
            (
                LockError::unavailable("down", std::io::Error::other("refused")),
                UNAVAILABLE,
            ),
            (
                LockError::permission_denied("WRONGPASS", std::io::Error::other("no")),
                NOPERM,
            ),
            (
                LockError::backend("odd", std::io::Error::other("reply")),
                FAILURE,
            ),
        ];
        for (error, code) in cases {
            assert_eq!(code_for(&error), code, "{error}");
        }
    }

    #[test]
    fn description_is_the_message_and_the_plain_root_cause_once() {
        let error = LockError::unavailable(
            "cannot reach 10.0.0.1:6379",
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        );
        assert_eq!(
            describe(&error),
            "store unavailable: cannot reach 10.0.0.1:6379: connection refused"
        );
        let repeated = LockError::backend("open failed: denied", std::io::Error::other("denied"));
        assert_eq!(describe(&repeated), "backend error: open failed: denied");
        assert_eq!(one_line("a\nb\r\n\nc"), "a | b | c");
    }

    /// A client library's layers between the message and the root cause,
    /// here one whose text is a dump, are left out.
    #[test]
    fn description_leaves_out_dumps_of_a_client_library() {
        #[derive(Debug)]
        struct Layer(std::io::Error);
        impl fmt::Display for Layer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "Transport(ConnectError({:?}))", self.0)
            }
        }
        impl Error for Layer {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let refused = std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
        let error = LockError::unavailable("cannot read the lock queue", Layer(refused));
        assert_eq!(
            describe(&error),
            "store unavailable: cannot read the lock queue: connection refused"
        );
        let dump = LockError::backend("odd reply", "Custom { kind: Other }");
        assert_eq!(describe(&dump), "backend error: odd reply");
    }
}
