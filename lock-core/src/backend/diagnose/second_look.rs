//! Second opinions on a port whose greeting got no answer, or a close:
//! does it answer a TLS hello, or a plain line any server answers?

use std::net::SocketAddr;
use std::time::Duration;

use super::socket::{connect, exchange, Exchange};
use super::{Finding, Protocol, Verdict};

/// A line most servers answer in some way, whatever they speak: HTTP
/// servers with a response, Redis with an error; a server that closes
/// the connection on it, or stays silent, says nothing.
const PLAIN_LINE: &[u8] = b"GET / HTTP/1.0\r\n\r\n";
/// The most a second opinion (a plain line, a TLS hello) waits: any
/// server that answers them answers at once.
const SECOND_OPINION: Duration = Duration::from_secs(1);

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
pub(super) fn speaks_tls(addr: SocketAddr, limit: Duration) -> bool {
    #[cfg(feature = "tls")]
    {
        super::hello::speaks_tls(addr, limit.min(SECOND_OPINION))
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = (addr, limit);
        false
    }
}
