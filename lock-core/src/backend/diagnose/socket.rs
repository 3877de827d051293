//! Talking to a port: connecting within a limit, sending a protocol's
//! greeting and reading until the reply can be judged. The lowest layer
//! of the probe; it knows no TLS library.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::words::io_words;
use super::{Finding, Protocol, Verdict};

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
