//! Why a connection to etcd failed: how an etcd member answers, for
//! lock-core's [`diagnose`], and the call the connect path makes when the
//! client's error is vague.

use lock_core::backend::diagnose::{self, Protocol, Verdict};
use lock_core::url::HostPort;
use lock_core::LockError;

use crate::config::EtcdConfig;

/// etcd's client port: gRPC over HTTP/2, so a member answers the HTTP/2
/// connection preface with a SETTINGS frame on stream 0.
struct Grpc;

static ETCD: Grpc = Grpc;

/// The HTTP/2 client preface and an empty SETTINGS frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
/// A frame header's length, and the SETTINGS frame type.
const FRAME_HEADER: usize = 9;
const SETTINGS: u8 = 0x04;

impl Protocol for Grpc {
    fn store(&self) -> &'static str {
        "etcd"
    }

    fn plain_scheme(&self) -> &'static str {
        "etcd"
    }

    fn tls_scheme(&self) -> &'static str {
        "etcds"
    }

    fn greeting(&self) -> Vec<u8> {
        PREFACE.to_vec()
    }

    fn judge(&self, reply: &[u8]) -> Verdict {
        if reply.len() < FRAME_HEADER {
            // A frame's length starts with a zero byte for any frame a
            // server sends first; other text is something else at once.
            return match reply.first() {
                Some(0) | None => Verdict::NeedMore,
                Some(_) => Verdict::Foreign,
            };
        }
        let stream = &reply[5..FRAME_HEADER];
        if reply[3] == SETTINGS && stream.iter().all(|&b| b & 0x7f == 0) {
            Verdict::Recognised
        } else {
            Verdict::Foreign
        }
    }
}

/// The error to report after connecting with `config` failed with
/// `error`: a failure that may come from the connection itself
/// ([`LockError::Unavailable`], [`LockError::Backend`]) is diagnosed, so
/// it names the member, what failed and what to try; refused credentials
/// stand as they are.
pub(crate) async fn explain(config: &EtcdConfig, error: LockError) -> LockError {
    match error {
        LockError::Unavailable { .. } | LockError::Backend { .. } => {
            let hosts = hosts(config);
            let tls = config.tls.as_ref();
            diagnose::explain(&ETCD, &hosts, tls, config.connect_timeout, error).await
        }
        other => other,
    }
}

/// The members' hosts and ports, from the endpoints' URLs.
fn hosts(config: &EtcdConfig) -> Vec<HostPort> {
    config
        .endpoints
        .iter()
        .filter_map(|endpoint| {
            let url = url::Url::parse(endpoint).ok()?;
            let host = url
                .host_str()?
                .trim_start_matches('[')
                .trim_end_matches(']');
            Some(HostPort::new(host, url.port_or_known_default()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http2_settings_frame_is_etcd_other_replies_are_not() {
        let settings = [0, 0, 12, 4, 0, 0, 0, 0, 0, 0, 5, 0];
        assert_eq!(ETCD.judge(&settings), Verdict::Recognised);
        assert_eq!(ETCD.judge(&settings[..4]), Verdict::NeedMore);
        assert_eq!(
            ETCD.judge(b"-ERR unknown command 'PRI'\r\n"),
            Verdict::Foreign
        );
        assert_eq!(ETCD.judge(b"HTTP/1.1 400 Bad Request"), Verdict::Foreign);
        let go_away = [0, 0, 8, 7, 0, 0, 0, 0, 0];
        assert_eq!(ETCD.judge(&go_away), Verdict::Foreign);
    }

    #[test]
    fn endpoints_become_hosts() {
        let config = EtcdConfig::new(["127.0.0.1:1", "[::1]:2379", "db:3"]);
        let shown: Vec<String> = hosts(&config).iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["127.0.0.1:1", "[::1]:2379", "db:3"]);
    }
}
