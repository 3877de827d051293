//! Why a connection to PostgreSQL failed: how a PostgreSQL server (or a
//! pooler speaking its protocol, such as PgBouncer) answers, for
//! lock-core's [`diagnose`](lock_core::backend::diagnose), and the call
//! the connect path makes when the client's error is vague.

use lock_core::backend::diagnose::{self, Protocol, Verdict};
use lock_core::LockError;

use crate::config::PgConfig;

/// PostgreSQL's wire protocol. TLS is negotiated inside it (an
/// `SSLRequest` first, whatever the `sslmode`), so a server always
/// answers the plain probe.
struct Wire;

static POSTGRES: Wire = Wire;

/// An `SSLRequest`: length 8, then the request code 80877103. Every
/// PostgreSQL server (and PgBouncer) answers it with one byte, `S` or `N`,
/// before anything else, without authentication.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

impl Protocol for Wire {
    fn store(&self) -> &'static str {
        "PostgreSQL"
    }

    fn plain_scheme(&self) -> &'static str {
        "postgres"
    }

    /// TLS is chosen by `sslmode`, not by the scheme.
    fn tls_scheme(&self) -> &'static str {
        "postgres"
    }

    fn greeting(&self) -> Vec<u8> {
        SSL_REQUEST.to_vec()
    }

    fn judge(&self, reply: &[u8]) -> Verdict {
        match reply.first() {
            None => Verdict::NeedMore,
            Some(b'S' | b'N') if reply.len() == 1 => Verdict::Recognised,
            Some(_) => Verdict::Foreign,
        }
    }
}

/// The error to report after connecting with `config` failed with
/// `error`: a failure that may come from the connection itself
/// ([`LockError::Unavailable`], [`LockError::Backend`]) is diagnosed, so
/// it names the server, what failed and what to try; refused credentials
/// and refused certificates stand as they are.
pub(crate) async fn explain(config: &PgConfig, error: LockError) -> LockError {
    match error {
        LockError::Unavailable { .. } | LockError::Backend { .. } => {
            let limit = config.connect_timeout;
            diagnose::explain(&POSTGRES, &config.hosts, None, limit, error).await
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_answers_the_ssl_request_with_one_byte() {
        assert_eq!(POSTGRES.judge(b""), Verdict::NeedMore);
        assert_eq!(POSTGRES.judge(b"S"), Verdict::Recognised);
        assert_eq!(POSTGRES.judge(b"N"), Verdict::Recognised);
        // Redis answering a garbled command, an HTTP server, ...
        assert_eq!(POSTGRES.judge(b"-ERR unknown"), Verdict::Foreign);
        assert_eq!(POSTGRES.judge(b"HTTP/1.1 400"), Verdict::Foreign);
        assert_eq!(POSTGRES.judge(b"NO"), Verdict::Foreign);
    }
}
