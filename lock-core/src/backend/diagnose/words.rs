//! The wording of connection failures, shared by every store, and client
//! errors' causes in plain words.

use std::error::Error as StdError;
use std::io;
use std::time::Duration;

use super::{Finding, Protocol};
use crate::error::LockError;
use crate::url::HostPort;

/// The error for `findings` (one per host tried), or `None` if any host
/// answered as the store. One host: `cannot connect to S at H: what
/// (hint)`; several: the first problem in full (the URL's own mistakes
/// first), then the others' hosts and what failed.
pub(super) fn failure(
    protocol: &dyn Protocol,
    findings: &[(HostPort, Finding)],
    limit: Duration,
) -> Option<LockError> {
    if findings.is_empty() || findings.iter().any(|(_, f)| *f == Finding::Answered) {
        return None;
    }
    let mut ordered: Vec<&(HostPort, Finding)> = findings.iter().collect();
    ordered.sort_by_key(|(_, finding)| !finding.is_configuration());
    let (host, first) = ordered[0];
    let (what, hint) = what_and_hint(protocol, host, first, limit);
    let mut message = format!(
        "cannot connect to {} at {host}: {what} ({hint})",
        protocol.store()
    );
    for (host, finding) in &ordered[1..] {
        let (what, _) = what_and_hint(protocol, host, finding, limit);
        message.push_str(&format!("; {host}: {what}"));
    }
    Some(if first.is_configuration() {
        LockError::invalid_config(message)
    } else {
        LockError::Unavailable {
            message,
            source: None,
        }
    })
}

/// What failed with `host`, and what to try.
fn what_and_hint(
    protocol: &dyn Protocol,
    host: &HostPort,
    finding: &Finding,
    limit: Duration,
) -> (String, String) {
    let store = protocol.store();
    let port = host.port;
    let limit = humantime::format_duration(limit);
    match finding {
        Finding::Answered => (
            format!("the server answers as {store}"),
            "see the server's log".to_owned(),
        ),
        Finding::Unresolved(why) => (
            format!("cannot resolve the host name: {why}"),
            "check the host name in the URL".to_owned(),
        ),
        Finding::Refused => (
            "connection refused".to_owned(),
            format!("is {store} running there, and is {port} its client port?"),
        ),
        Finding::NoConnection => (
            format!("no connection within {limit}"),
            format!("is the host up, and does the network let port {port} through?"),
        ),
        Finding::Unreachable(why) => (why.clone(), "check the host and the network".to_owned()),
        Finding::NoAnswer => (
            format!("the connection was accepted, but nothing answered within {limit}"),
            format!("is the server stopped or overloaded, or is {port} another service's port?"),
        ),
        Finding::Closed => (
            "the server closed the connection without answering".to_owned(),
            format!("is {port} a {store} client port, and is the server ready to serve clients?"),
        ),
        Finding::OtherProtocol => (
            format!("the server there is not {store}"),
            format!("check the host and port in the URL: is {port} the {store} client port?"),
        ),
        Finding::ExpectsTls => (
            "the server expects TLS".to_owned(),
            format!(
                "use {}:// for this port, with tls_ca_file",
                protocol.tls_scheme()
            ),
        ),
        Finding::NotTls => (
            "the server does not speak TLS on this port".to_owned(),
            format!(
                "use {}:// for this port, or the server's TLS port",
                protocol.plain_scheme()
            ),
        ),
        Finding::Tls { problem, hint } => (format!("TLS: {problem}"), hint.clone()),
    }
}

/// An I/O error in plain words: told by its kind ("connection refused")
/// where the kind says it, else its text without the OS error number.
pub fn io_words(error: &io::Error) -> String {
    use io::ErrorKind as K;
    let words = match error.kind() {
        K::ConnectionRefused => "connection refused",
        K::ConnectionReset => "the connection was reset by the other side",
        K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
            "the other side closed the connection"
        }
        K::TimedOut | K::WouldBlock => "timed out",
        K::HostUnreachable => "no route to the host",
        K::NetworkUnreachable => "the network is unreachable",
        K::NetworkDown => "the network is down",
        K::AddrNotAvailable => "the address is not available here",
        K::PermissionDenied => "permission denied",
        K::NotFound => "no such file or directory",
        K::ReadOnlyFilesystem => "read-only file system",
        _ => match error.get_ref() {
            Some(inner) if is_plain(&inner.to_string()) => return inner.to_string(),
            _ => return without_os_code(&error.to_string()),
        },
    };
    words.to_owned()
}

/// The root cause of `error` in plain words: the deepest of its sources
/// (or itself) whose text is not a dump of a client library's internals,
/// an I/O error told by [`io_words`]. `None` when `error` has no source
/// or none reads plainly.
pub fn root_cause(error: &(dyn StdError + 'static)) -> Option<String> {
    let chain: Vec<&(dyn StdError + 'static)> =
        std::iter::successors(error.source(), |&e| e.source()).collect();
    chain.iter().rev().find_map(|&cause| {
        if let Some(io) = as_io(cause) {
            return Some(io_words(io));
        }
        let text = cause.to_string();
        is_plain(&text).then(|| without_os_code(&text))
    })
}

/// `cause` as an I/O error, also when a client library shares it in an
/// `Arc` (whose `Error` impl hides the type).
fn as_io<'a>(cause: &'a (dyn StdError + 'static)) -> Option<&'a io::Error> {
    type Shared = std::sync::Arc<dyn StdError + Send + Sync>;
    match cause.downcast_ref::<Shared>() {
        Some(shared) => (**shared).downcast_ref::<io::Error>(),
        None => cause.downcast_ref::<io::Error>(),
    }
}

/// Text a person can read: not empty, and not a `Debug` dump or a list
/// of a client library's fields (`code: …, message: …`).
fn is_plain(text: &str) -> bool {
    const DUMPS: [&str; 8] = [
        "{",
        "}",
        "Error(",
        "Some(",
        "source:",
        "code: ",
        "message: ",
        "kind: ",
    ];
    let text = text.trim();
    !text.is_empty() && !DUMPS.iter().any(|dump| text.contains(dump))
}

/// `text` without a trailing ` (os error N)`.
fn without_os_code(text: &str) -> String {
    match text.find(" (os error ") {
        Some(at) => text[..at].to_owned(),
        None => text.to_owned(),
    }
}
