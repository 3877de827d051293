//! The probe itself, on blocking sockets (run on tokio's blocking pool):
//! connect, greet, read the answer, and for answers that say nothing,
//! ask again in plain text and in TLS.

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::second_look::{speaks_tls, unclear};
use super::socket::{connect, exchange, looks_like_tls, Exchange};
use super::words::io_words;
use super::{Finding, Protocol, Target};

/// How long an idle connection is watched for a close: a server that
/// closes every connection does so at once.
const IDLE_CHECK: Duration = Duration::from_millis(300);

/// Probes `target` (see [`super::diagnose`]).
pub(super) fn run(protocol: &dyn Protocol, target: &Target) -> Finding {
    let addr = match resolve(target) {
        Ok(addr) => addr,
        Err(finding) => return finding,
    };
    let tcp = match connect(addr, target.limit) {
        Ok(tcp) => tcp,
        Err(finding) => return finding,
    };
    match &target.tls {
        #[cfg(feature = "tls")]
        Some(files) => {
            super::tls::probe(protocol, tcp, addr, &target.host.host, files, target.limit)
        }
        _ => plain(protocol, tcp, addr, target.limit),
    }
}

/// The first address of the target's host.
fn resolve(target: &Target) -> Result<SocketAddr, Finding> {
    let host = &target.host;
    match (host.host.as_str(), host.port).to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| Finding::Unresolved("the name has no address".to_owned())),
        Err(e) => Err(Finding::Unresolved(io_words(&e))),
    }
}

/// A plain URL: greet; a foreign or missing answer is told apart by the
/// second opinions.
fn plain(
    protocol: &dyn Protocol,
    mut tcp: TcpStream,
    addr: SocketAddr,
    limit: Duration,
) -> Finding {
    match exchange(&mut tcp, protocol, limit) {
        Exchange::Recognised => Finding::Answered,
        Exchange::Foreign(reply) if looks_like_tls(&reply) => Finding::ExpectsTls,
        Exchange::Foreign(_) => Finding::OtherProtocol,
        Exchange::Closed if !protocol.may_close_unanswered() => {
            if speaks_tls(addr, limit) {
                Finding::ExpectsTls
            } else if closes_idle_connections(addr, limit) {
                // A proxy with nothing behind it, a server shutting down:
                // it did not object to the greeting, it closes everything.
                Finding::Closed
            } else {
                Finding::OtherProtocol
            }
        }
        Exchange::Closed => unclear(addr, limit, Finding::Closed),
        Exchange::Silent => unclear(addr, limit, Finding::NoAnswer),
        Exchange::Broken(e) => Finding::Unreachable(io_words(&e)),
    }
}

/// Whether the server at `addr` closes a connection on which nothing was
/// sent (as a proxy with no server behind it does), rather than waiting
/// for a request.
fn closes_idle_connections(addr: SocketAddr, limit: Duration) -> bool {
    let Ok(mut tcp) = connect(addr, limit) else {
        return true;
    };
    let _ = tcp.set_read_timeout(Some(limit.min(IDLE_CHECK)));
    let mut byte = [0u8; 1];
    match tcp.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock),
    }
}
