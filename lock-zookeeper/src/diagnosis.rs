//! Why a session could not be opened: how a ZooKeeper server answers, for
//! lock-core's [`diagnose`](lock_core::backend::diagnose), and the call
//! the connect path makes when the client's error is vague (the client
//! reports a refused port, a server of another kind and a failed TLS
//! handshake alike as "no available hosts" or a timeout).

use lock_core::backend::diagnose::{self, Protocol, Verdict};
use lock_core::LockError;

use crate::config::ZkConfig;

/// ZooKeeper's client protocol: a connect request, answered with a
/// connect response (a fresh session, closed again at once).
struct Jute;

static ZOOKEEPER: Jute = Jute;

/// The session timeout the probe asks for; the server raises it to its
/// minimum, and the session is closed right after anyway.
const PROBE_SESSION_MS: i32 = 4000;
/// A connect response's length: protocol version, timeout, session id,
/// password (length and 16 bytes) and the read-only flag.
const RESPONSE_LENGTH: usize = 4 + 4 + 8 + 4 + 16 + 1;
/// Where the password's length sits in a response (after the frame's
/// length, the version, the timeout and the session id).
const PASSWORD_LENGTH_AT: usize = 4 + 4 + 4 + 8;

impl Protocol for Jute {
    fn store(&self) -> &'static str {
        "ZooKeeper"
    }

    fn plain_scheme(&self) -> &'static str {
        "zk"
    }

    fn tls_scheme(&self) -> &'static str {
        "zks"
    }

    fn greeting(&self) -> Vec<u8> {
        let mut request = Vec::with_capacity(49);
        request.extend_from_slice(&0i32.to_be_bytes()); // protocol version
        request.extend_from_slice(&0i64.to_be_bytes()); // last zxid seen
        request.extend_from_slice(&PROBE_SESSION_MS.to_be_bytes());
        request.extend_from_slice(&0i64.to_be_bytes()); // session id: new
        request.extend_from_slice(&16i32.to_be_bytes()); // password
        request.extend_from_slice(&[0; 16]);
        // Read-only allowed: a server cut off from its quorum answers too.
        request.push(1);
        let mut frame = (request.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&request);
        frame
    }

    fn judge(&self, reply: &[u8]) -> Verdict {
        if reply.len() < 4 {
            return match reply.first() {
                Some(0) | None => Verdict::NeedMore,
                Some(_) => Verdict::Foreign,
            };
        }
        let length = u32::from_be_bytes([reply[0], reply[1], reply[2], reply[3]]) as usize;
        // Older servers leave out the read-only flag.
        if !(RESPONSE_LENGTH - 1..=RESPONSE_LENGTH).contains(&length) {
            return Verdict::Foreign;
        }
        if reply.len() < PASSWORD_LENGTH_AT + 4 {
            return Verdict::NeedMore;
        }
        let password = &reply[PASSWORD_LENGTH_AT..PASSWORD_LENGTH_AT + 4];
        if password == 16i32.to_be_bytes() {
            Verdict::Recognised
        } else {
            Verdict::Foreign
        }
    }

    /// A server without a quorum closes the connection without a word.
    fn may_close_unanswered(&self) -> bool {
        true
    }

    /// Closes the session the probe opened.
    fn farewell(&self) -> Vec<u8> {
        const CLOSE_SESSION: i32 = -11;
        let mut frame = 8i32.to_be_bytes().to_vec();
        frame.extend_from_slice(&1i32.to_be_bytes()); // xid
        frame.extend_from_slice(&CLOSE_SESSION.to_be_bytes());
        frame
    }
}

/// The error to report after opening a session with `config` failed with
/// `error`: a failure that may come from the connection itself
/// ([`LockError::Unavailable`], [`LockError::Backend`]) is diagnosed, so
/// it names the server, what failed and what to try; refused credentials
/// stand as they are.
pub(crate) async fn explain(config: &ZkConfig, error: LockError) -> LockError {
    match error {
        LockError::Unavailable { .. } | LockError::Backend { .. } => {
            let tls = config.tls.as_ref();
            let limit = config.connect_timeout;
            diagnose::explain(&ZOOKEEPER, &config.hosts, tls, limit, error).await
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_response_is_zookeeper_other_replies_are_not() {
        let mut response = (RESPONSE_LENGTH as u32).to_be_bytes().to_vec();
        response.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x0f, 0xa0]);
        response.extend_from_slice(&[1; 8]);
        response.extend_from_slice(&16i32.to_be_bytes());
        assert_eq!(ZOOKEEPER.judge(&response[..6]), Verdict::NeedMore);
        assert_eq!(ZOOKEEPER.judge(&response), Verdict::Recognised);
        assert_eq!(
            ZOOKEEPER.judge(b"-ERR unknown command\r\n"),
            Verdict::Foreign
        );
        assert_eq!(ZOOKEEPER.judge(b"HTTP/1.0 404 Not Found"), Verdict::Foreign);
        assert_eq!(
            ZOOKEEPER.judge(&[0, 0, 0x0c, 4, 0, 0, 0, 0, 0]),
            Verdict::Foreign
        );
        let greeting = ZOOKEEPER.greeting();
        assert_eq!(greeting.len(), 4 + 45);
        assert_eq!(greeting[..4], 45i32.to_be_bytes());
    }
}
