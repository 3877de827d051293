//! The probe itself, on blocking sockets (run on tokio's blocking pool):
//! connect, greet, read the answer, and for answers that say nothing,
//! ask again in plain text and in TLS.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::words::io_words;
use super::{Finding, Protocol, Target, Verdict};

/// A line most servers answer in some way, whatever they speak: HTTP
/// servers with a response, Redis with an error; a server that closes
/// the connection on it, or stays silent, says nothing.
const PLAIN_LINE: &[u8] = b"GET / HTTP/1.0\r\n\r\n";
/// The most a second opinion (a plain line, a TLS hello) waits: any
/// server that answers them answers at once.
const SECOND_OPINION: Duration = Duration::from_secs(1);
/// How long an idle connection is watched for a close: a server that
/// closes every connection does so at once.
const IDLE_CHECK: Duration = Duration::from_millis(300);
/// The most of a reply read before it is judged foreign.
const LONGEST_REPLY: usize = 4096;

/// What came of greeting a server.
pub(super) enum Exchange {
    /// The protocol recognised the reply.
    Recognised,
    /// Bytes that are not the protocol.
    Foreign(Vec<u8>),
    /// The server closed (or reset) the connection without a byte.
    Closed,
    /// Nothing within the limit.
    Silent,
    /// Another failure (a TLS error, on a TLS connection).
    Broken(io::Error),
}

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

/// A TCP connection to `addr` within `limit`, its reads and writes
/// bounded by `limit` too.
pub(super) fn connect(addr: SocketAddr, limit: Duration) -> Result<TcpStream, Finding> {
    match TcpStream::connect_timeout(&addr, limit) {
        Ok(tcp) => {
            let _ = tcp.set_write_timeout(Some(limit));
            let _ = tcp.set_nodelay(true);
            Ok(tcp)
        }
        Err(e) => Err(match e.kind() {
            ErrorKind::ConnectionRefused => Finding::Refused,
            ErrorKind::TimedOut | ErrorKind::WouldBlock => Finding::NoConnection,
            _ => Finding::Unreachable(io_words(&e)),
        }),
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

/// The greeting got no answer, or a close the store may give: a TLS
/// port, or a server that answers a plain line (and so is not silent, but
/// not the store either), or else `otherwise`.
pub(super) fn unclear(addr: SocketAddr, limit: Duration, otherwise: Finding) -> Finding {
    // Both at once: a server silent to one is often silent to the other.
    let (tls, line) = std::thread::scope(|scope| {
        let tls = scope.spawn(|| speaks_tls(addr, limit));
        let line = plain_line(addr, limit);
        (tls.join().unwrap_or(false), line)
    });
    match (tls, line) {
        (true, _) => Finding::ExpectsTls,
        (false, Some(Exchange::Foreign(_))) => Finding::OtherProtocol,
        _ => otherwise,
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

/// What the server at `addr` does with [`PLAIN_LINE`].
fn plain_line(addr: SocketAddr, limit: Duration) -> Option<Exchange> {
    let mut tcp = connect(addr, limit.min(SECOND_OPINION)).ok()?;
    Some(exchange(&mut tcp, &AnyReply, limit.min(SECOND_OPINION)))
}

/// Any reply at all is "foreign": for [`plain_line`].
struct AnyReply;

impl Protocol for AnyReply {
    fn store(&self) -> &'static str {
        "any server"
    }
    fn plain_scheme(&self) -> &'static str {
        ""
    }
    fn tls_scheme(&self) -> &'static str {
        ""
    }
    fn greeting(&self) -> Vec<u8> {
        PLAIN_LINE.to_vec()
    }
    fn judge(&self, _reply: &[u8]) -> Verdict {
        Verdict::Foreign
    }
}

/// Whether the server at `addr` answers a TLS hello as a TLS server.
fn speaks_tls(addr: SocketAddr, limit: Duration) -> bool {
    #[cfg(feature = "tls")]
    {
        super::tls::speaks_tls(addr, limit.min(SECOND_OPINION))
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = (addr, limit);
        false
    }
}

/// A TLS record header: an alert or a handshake of TLS 1.0 to 1.3.
pub(super) fn looks_like_tls(reply: &[u8]) -> bool {
    matches!(reply, [0x15 | 0x16, 0x03, ..])
}

/// A socket whose reads can be bounded: a TCP stream, or a TLS stream
/// over one.
pub(super) trait Socket: Read + Write {
    fn tcp(&self) -> &TcpStream;
}

impl Socket for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

/// Sends `protocol`'s greeting on `stream` and reads until the protocol
/// can judge the reply, the server closes, or `limit` passes.
pub(super) fn exchange(
    stream: &mut impl Socket,
    protocol: &dyn Protocol,
    limit: Duration,
) -> Exchange {
    let deadline = Instant::now() + limit;
    if let Err(e) = stream
        .write_all(&protocol.greeting())
        .and_then(|()| stream.flush())
    {
        return ended(e, Vec::new());
    }
    let mut reply = Vec::new();
    let mut buffer = [0u8; 512];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return ended(ErrorKind::TimedOut.into(), reply);
        }
        let _ = stream.tcp().set_read_timeout(Some(left));
        let read = match stream.read(&mut buffer) {
            Ok(0) => return ended(ErrorKind::UnexpectedEof.into(), reply),
            Ok(read) => read,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return ended(e, reply),
        };
        reply.extend_from_slice(&buffer[..read]);
        match protocol.judge(&reply) {
            Verdict::Recognised => {
                let _ = stream.write_all(&protocol.farewell());
                let _ = stream.flush();
                return Exchange::Recognised;
            }
            Verdict::Foreign => return Exchange::Foreign(reply),
            Verdict::NeedMore if reply.len() >= LONGEST_REPLY => return Exchange::Foreign(reply),
            Verdict::NeedMore => {}
        }
    }
}

/// The exchange ended by `error` after `reply`: bytes that never became
/// the protocol are foreign; without any, the error says what happened.
fn ended(error: io::Error, reply: Vec<u8>) -> Exchange {
    if !reply.is_empty() {
        return Exchange::Foreign(reply);
    }
    match error.kind() {
        ErrorKind::TimedOut | ErrorKind::WouldBlock => Exchange::Silent,
        ErrorKind::UnexpectedEof
        | ErrorKind::ConnectionReset
        | ErrorKind::ConnectionAborted
        | ErrorKind::BrokenPipe => Exchange::Closed,
        _ => Exchange::Broken(error),
    }
}
