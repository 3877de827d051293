//! Why a connection to Redis failed: how a Redis server (or sentinel)
//! answers, for lock-core's [`diagnose`](lock_core::backend::diagnose), and
//! the one call the connect paths make when the client's error is vague.

use lock_core::backend::diagnose::{self, Protocol, Verdict};
use lock_core::url::HostPort;
use lock_core::LockError;

use crate::config::{RedisConfig, Topology};

/// Redis's protocol as the URLs of one topology name it: an inline `PING`
/// answered with a RESP simple string or error (`+PONG`, `-NOAUTH …`).
pub(crate) struct Resp {
    store: &'static str,
    plain: &'static str,
    tls: &'static str,
}

static SINGLE: Resp = Resp {
    store: "Redis",
    plain: "redis",
    tls: "rediss",
};
static CLUSTER: Resp = Resp {
    store: "Redis",
    plain: "redis+cluster",
    tls: "rediss+cluster",
};
static REDLOCK: Resp = Resp {
    store: "Redis",
    plain: "redlock",
    tls: "redlocks",
};
static SENTINEL_MASTER: Resp = Resp {
    store: "Redis",
    plain: "redis+sentinel",
    tls: "rediss+sentinel",
};
/// A sentinel itself: it answers `PING` the same way.
pub(crate) static SENTINEL: Resp = Resp {
    store: "Redis Sentinel",
    plain: "redis+sentinel",
    tls: "rediss+sentinel",
};

impl Protocol for Resp {
    fn store(&self) -> &'static str {
        self.store
    }

    fn plain_scheme(&self) -> &'static str {
        self.plain
    }

    fn tls_scheme(&self) -> &'static str {
        self.tls
    }

    fn greeting(&self) -> Vec<u8> {
        b"PING\r\n".to_vec()
    }

    fn judge(&self, reply: &[u8]) -> Verdict {
        match reply.first() {
            None => Verdict::NeedMore,
            Some(b'+' | b'-') if reply.windows(2).any(|pair| pair == b"\r\n") => {
                Verdict::Recognised
            }
            Some(b'+' | b'-') => Verdict::NeedMore,
            Some(_) => Verdict::Foreign,
        }
    }
}

/// The protocol of the servers `config`'s URL names (its masters, not its
/// sentinels).
pub(crate) fn protocol(config: &RedisConfig) -> &'static Resp {
    match config.topology {
        Topology::Single => &SINGLE,
        Topology::Cluster => &CLUSTER,
        Topology::Redlock => &REDLOCK,
        Topology::Sentinel => &SENTINEL_MASTER,
    }
}

/// The error to report after connecting to `nodes` failed with `error`:
/// a failure that may come from the connection itself
/// ([`LockError::Unavailable`], [`LockError::Backend`]) is diagnosed, so
/// it names the host, what failed and what to try; refused credentials
/// and configuration errors stand as they are.
pub(crate) async fn explain(
    config: &RedisConfig,
    protocol: &'static Resp,
    nodes: &[HostPort],
    error: LockError,
) -> LockError {
    match error {
        LockError::Unavailable { .. } | LockError::Backend { .. } => {
            let tls = config.tls.as_ref();
            diagnose::explain(protocol, nodes, tls, config.connect_timeout, error).await
        }
        other => other,
    }
}

/// What `error` says, without the kind's prefix (`store unavailable: `),
/// for messages that quote another error.
pub(crate) fn detail(error: &LockError) -> String {
    match error {
        LockError::Unavailable { message, .. }
        | LockError::Backend { message, .. }
        | LockError::PermissionDenied { message, .. } => message.clone(),
        LockError::InvalidConfig { reason } => reason.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pong_and_errors_are_redis_other_replies_are_not() {
        assert_eq!(SINGLE.judge(b"+PONG\r\n"), Verdict::Recognised);
        assert_eq!(
            SINGLE.judge(b"-NOAUTH Authentication required.\r\n"),
            Verdict::Recognised
        );
        assert_eq!(SINGLE.judge(b"+PO"), Verdict::NeedMore);
        assert_eq!(
            SINGLE.judge(b"HTTP/1.1 400 Bad Request\r\n"),
            Verdict::Foreign
        );
        assert_eq!(SINGLE.judge(&[0, 0, 0, 37]), Verdict::Foreign);
    }
}
