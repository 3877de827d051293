//! Why a connection to a store failed, in plain words.
//!
//! Client libraries often report a failed connection vaguely ("broken
//! pipe", "transport error", a parse error of a reply that was never
//! meant for them) or as a dump of their internals. When a store's client
//! fails like that, the store calls [`explain`] with the hosts it tried:
//! a probe of its own, with the same TLS files, finds out for each host
//! whether
//!
//! * the connection was refused, timed out, or the name did not resolve;
//! * the connection was accepted but nothing answered;
//! * something answered, but not the store's protocol (the URL points at
//!   another server), or answers in TLS to a plain URL, or in plain to a
//!   TLS URL;
//! * the TLS handshake failed, and why (an untrusted certificate, a
//!   client certificate missing or refused);
//! * or the server answered as the store, in which case the failure lies
//!   elsewhere and the store's own error stands.
//!
//! The error then names the host, says what failed and what to try, in
//! one line, the same way for every store: unreachable hosts give
//! [`LockError::Unavailable`], a URL pointing at the wrong server or TLS
//! settings that cannot work give [`LockError::InvalidConfig`].
//!
//! A store contributes only how to recognise its own protocol: a
//! [`Protocol`] says what to send and whether a reply is the store's.
//! TLS handshakes need the cargo feature `tls`; without it a TLS URL is
//! probed as if it were plain, and a TLS port is not told apart from
//! another protocol.
//!
//! [`root_cause`] and [`io_words`] put a client error's cause in plain
//! words, for messages that are not about connecting.

#[cfg(feature = "tls")]
mod hello;
mod probe;
mod second_look;
mod socket;
#[cfg(feature = "tls")]
mod tls;
mod words;

use std::time::Duration;

use crate::error::LockError;
use crate::url::{HostPort, TlsFiles};

pub use words::{io_words, root_cause};

/// How a store's server answers a greeting: the store's part of a
/// diagnosis. Implementations are plain values, usually a `static`.
pub trait Protocol: Send + Sync + 'static {
    /// The store's name in messages: `Redis`, `etcd`, `ZooKeeper`.
    fn store(&self) -> &'static str;

    /// The URL scheme without TLS (`redis`), named in hints.
    fn plain_scheme(&self) -> &'static str;

    /// The URL scheme with TLS (`rediss`), named in hints.
    fn tls_scheme(&self) -> &'static str;

    /// Bytes that make a server of this store answer at once, whatever
    /// its state (a `PING`, a handshake).
    fn greeting(&self) -> Vec<u8>;

    /// Whether `reply`, the bytes read so far after the greeting, comes
    /// from a server of this store.
    fn judge(&self, reply: &[u8]) -> Verdict;

    /// Whether a server of this store may close a connection without a
    /// word after the greeting while it cannot serve (a ZooKeeper server
    /// without a quorum does). If not (the default), such a close means
    /// the server is not this store's.
    fn may_close_unanswered(&self) -> bool {
        false
    }

    /// Bytes to send after a recognised reply, to give back what the
    /// greeting took (a ZooKeeper session); empty by default.
    fn farewell(&self) -> Vec<u8> {
        Vec::new()
    }
}

/// A [`Protocol`]'s judgement of a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The reply is this store's protocol.
    Recognised,
    /// The reply is something else.
    Foreign,
    /// Too short to tell: read more.
    NeedMore,
}

/// What a probe of one host found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Finding {
    /// The server answered as the store: the failure lies elsewhere.
    Answered,
    /// The host name did not resolve; the resolver's words.
    Unresolved(String),
    /// Nothing listens on the port.
    Refused,
    /// No TCP connection within the limit (host down, packets dropped).
    NoConnection,
    /// The connection failed otherwise; the cause in plain words.
    Unreachable(String),
    /// The connection was accepted, but nothing answered within the limit.
    NoAnswer,
    /// The server closed the connection without a word, also to a plain
    /// line of text: not serving clients, or not the store.
    Closed,
    /// The server answered, but not as the store.
    OtherProtocol,
    /// A plain URL, but the port speaks TLS.
    ExpectsTls,
    /// A TLS URL, but the port does not speak TLS.
    NotTls,
    /// The TLS handshake failed.
    Tls {
        /// What failed, in plain words.
        problem: String,
        /// What to change.
        hint: String,
    },
}

impl Finding {
    /// True when the finding means the URL or its TLS files must change
    /// ([`LockError::InvalidConfig`]) rather than the server must come
    /// back ([`LockError::Unavailable`]).
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            Finding::OtherProtocol | Finding::ExpectsTls | Finding::NotTls | Finding::Tls { .. }
        )
    }
}

/// One host to probe: where, with which TLS files (`None`: plain TCP),
/// and how long each step may wait.
#[derive(Clone, Debug)]
pub struct Target {
    /// The host and port.
    pub host: HostPort,
    /// The URL's TLS files, for a TLS URL.
    pub tls: Option<TlsFiles>,
    /// How long connecting, and then a reply, may take (the URL's
    /// `connect_timeout`).
    pub limit: Duration,
}

/// The longest a probe waits for any one step (connecting, a reply): it
/// runs after the store's client already waited out its own timeout, so a
/// server that answers at all answers well within this.
pub const PROBE_STEP_LIMIT: Duration = Duration::from_secs(2);

/// Probes `target` as a server of `protocol`. Never fails: a probe that
/// cannot even start reports why in the [`Finding`]. Takes at most about
/// three times `target.limit` (capped at [`PROBE_STEP_LIMIT`]; a host that
/// accepts and never answers is asked twice), and far less for anything
/// that answers or refuses.
pub async fn diagnose(protocol: &'static dyn Protocol, mut target: Target) -> Finding {
    target.limit = target.limit.min(PROBE_STEP_LIMIT);
    let task = tokio::task::spawn_blocking(move || probe::run(protocol, &target));
    task.await
        .unwrap_or_else(|e| Finding::Unreachable(format!("the probe failed: {e}")))
}

/// The error to report after `protocol`'s client failed to reach `hosts`
/// with `error`: `error` itself when any host answers as the store (the
/// client's error says more than a probe can), else an error naming the
/// hosts, what failed and what to try. See the [module docs](self).
///
/// The hosts are probed at once, each with `tls` and `limit` as in
/// [`Target`].
pub async fn explain(
    protocol: &'static dyn Protocol,
    hosts: &[HostPort],
    tls: Option<&TlsFiles>,
    limit: Duration,
    error: LockError,
) -> LockError {
    let probes = hosts.iter().map(|host| {
        let target = Target {
            host: host.clone(),
            tls: tls.cloned(),
            limit,
        };
        async move { (target.host.clone(), diagnose(protocol, target).await) }
    });
    let findings = futures_util::future::join_all(probes).await;
    match words::failure(protocol, &findings, limit) {
        Some(explained) => {
            tracing::debug!(%error, explained = %explained, "distlock: connection failure diagnosed");
            explained
        }
        None => error,
    }
}

#[cfg(test)]
mod tests;
