//! Connecting with `etcd-client`, turning its errors into [`LockError`]s,
//! and retrying requests that failed because a member was unreachable.

use std::error::Error as StdError;
use std::future::Future;
use std::time::{Duration, Instant};

use etcd_client::{
    Certificate, Client, ConnectOptions, GetResponse, Identity, TlsOptions, Txn, TxnOpResponse,
    TxnResponse,
};
use lock_core::backend::diagnose::root_cause;
use lock_core::backend::Backoff;
use lock_core::LockError;

use crate::config::EtcdConfig;

/// HTTP/2 ping interval. etcd answers pings more frequent than every 5 s
/// (`--grpc-keepalive-min-time`) with GOAWAY, so stay well above it; the
/// pings only serve to notice a silently dead connection under a watch.
const PING_INTERVAL: Duration = Duration::from_secs(10);
/// First and longest pause between retries of an unavailable request.
const FIRST_RETRY: Duration = Duration::from_millis(5);
const LONGEST_RETRY: Duration = Duration::from_millis(250);

impl EtcdConfig {
    /// A client set up as the store's own (same servers, timeouts,
    /// credentials, TLS), on every endpoint; the store connects with it
    /// too. For tools that talk to the same servers with raw commands,
    /// such as benchmarks.
    ///
    /// Reaches the cluster at once: authenticates when a user is
    /// configured, else asks a member for its status (any answer will
    /// do), retrying across endpoints within the connect timeout. A
    /// single endpoint that cannot be reached is not retried.
    ///
    /// # Errors
    ///
    /// [`LockError::PermissionDenied`] for refused credentials;
    /// [`LockError::Unavailable`] when no endpoint can be reached, and
    /// [`LockError::InvalidConfig`] when the endpoints are not etcd (or
    /// not TLS as the URL says, or the TLS handshake fails), each naming
    /// the endpoints, what failed and what to try.
    pub async fn connect(&self) -> Result<Client, LockError> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(self.connect_timeout)
            .with_timeout(self.response_timeout)
            .with_keep_alive(PING_INTERVAL, self.response_timeout)
            // Pings without streams count as abuse for etcd (PermitWithoutStream off).
            .with_keep_alive_while_idle(false)
            // A member cut off from the leader refuses requests and ends its
            // watch streams, instead of serving stale state.
            .with_require_leader(true);
        if let (Some(user), Some(password)) = (&self.user, &self.password) {
            options = options
                .with_user(user.clone(), password.expose())
                .with_auto_token_refresh(true);
        }
        if let Some(tls) = &self.tls {
            let mut tls_options = TlsOptions::new();
            if let Some(ca) = &tls.ca {
                tls_options = tls_options.ca_certificate(Certificate::from_pem(ca.bytes()));
            }
            if let Some(identity) = &tls.identity {
                tls_options = tls_options.identity(Identity::from_pem(
                    identity.cert.bytes(),
                    identity.key.bytes(),
                ));
            }
            options = options.with_tls(tls_options);
        }
        let context = format!("cannot connect to etcd at {}", self.endpoints.join(", "));
        let connected = match Client::connect(&self.endpoints, Some(options)).await {
            Ok(client) if self.user.is_some() => Ok(client),
            Ok(client) => self.reach(&client, &context).await.map(|()| client),
            Err(error) => Err(map_error(&context, error)),
        };
        match connected {
            Ok(client) => Ok(client),
            Err(error) => Err(crate::diagnosis::explain(self, error).await),
        }
    }

    /// Asks the cluster for a member's status until one answers (with
    /// anything, even a refusal: it was reached) or the connect timeout
    /// passes; with one endpoint, a failure to reach it ends at once.
    async fn reach(&self, client: &Client, context: &str) -> Result<(), LockError> {
        let deadline = Instant::now() + self.connect_timeout;
        let bound = self.connect_timeout + self.response_timeout;
        let mut pauses = Backoff::exponential(FIRST_RETRY, LONGEST_RETRY).delays();
        loop {
            let mut maintenance = client.maintenance_client();
            let error = match tokio::time::timeout(bound, maintenance.status()).await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(error)) if answered(&error) => return Ok(()),
                Ok(Err(error)) => map_error(context, error),
                Err(_) => LockError::Unavailable {
                    message: format!("{context}: no answer within {bound:?}"),
                    source: None,
                },
            };
            match pauses.next() {
                Some(pause) if self.endpoints.len() > 1 && Instant::now() + pause < deadline => {
                    tokio::time::sleep(pause).await;
                }
                _ => return Err(error),
            }
        }
    }
}

/// True when `error` is a member's answer (a gRPC status the server
/// sent), not the client's failure to reach one: the client's own
/// failures carry their cause as a source.
fn answered(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status) if status.source().is_none())
}

/// Classifies an `etcd-client` error: unreachable members, timeouts and
/// elections are [`LockError::Unavailable`] (retriable); refused
/// credentials and denied permissions are [`LockError::PermissionDenied`];
/// the rest is [`LockError::Backend`]. The message names `context` and the
/// cause in plain words (the member's own message, or the client's
/// failure by its root cause), never the client's internals.
pub(crate) fn map_error(context: &str, error: etcd_client::Error) -> LockError {
    use etcd_client::Error as E;
    let message = format!("{context}: {}", in_words(&error));
    let retriable = match &error {
        E::GRpcStatus(status) => {
            // tonic is not a direct dependency: compare the numeric gRPC codes.
            let code = status.code() as i32;
            if status.message().contains("authentication failed") || code == UNAUTHENTICATED {
                return LockError::permission_denied(
                    format!(
                        "{context}: etcd refused the user name or password ({}): check them \
                         in the URL",
                        status.message()
                    ),
                    error,
                );
            }
            if code == PERMISSION_DENIED {
                return LockError::permission_denied(
                    format!(
                        "{context}: etcd denied permission ({}): give a user and password \
                         whose role may read and write keys under `{}/`",
                        status.message(),
                        crate::keys::ROOT
                    ),
                    error,
                );
            }
            is_retriable_code(code)
        }
        E::TransportError(_) | E::IoError(_) | E::WatchError(_) => true,
        // "lease not found" is not retriable; a closed stream is.
        E::LeaseKeepAliveError(reason) => !reason.contains("not found"),
        _ => false,
    };
    if retriable {
        LockError::unavailable(message, error)
    } else {
        LockError::backend(message, error)
    }
}

/// The cause of `error` in plain words: a member's status message, with
/// the client's root cause when the client made the status itself
/// ("tcp connect error: connection refused").
fn in_words(error: &etcd_client::Error) -> String {
    match error {
        etcd_client::Error::GRpcStatus(status) => match root_cause(status) {
            Some(cause) if status.source().is_some() => format!("{}: {cause}", status.message()),
            _ => status.message().to_owned(),
        },
        other => root_cause(other).unwrap_or_else(|| other.to_string()),
    }
}

/// gRPC's code for "permission denied".
const PERMISSION_DENIED: i32 = 7;
/// gRPC's code for "unauthenticated" (no or an expired token).
const UNAUTHENTICATED: i32 = 16;

/// True for etcd's "requested lease not found": a write attached to a lease
/// that was revoked or expired before this process noticed.
pub(crate) fn is_lease_not_found(error: &LockError) -> bool {
    let LockError::Backend {
        source: Some(source),
        ..
    } = error
    else {
        return false;
    };
    match source.downcast_ref::<etcd_client::Error>() {
        Some(etcd_client::Error::GRpcStatus(status)) => {
            status.message().contains("lease not found")
        }
        _ => false,
    }
}

/// gRPC codes that mean "try again, maybe elsewhere": the member is down
/// or has no leader (`Unavailable`), the request timed out on the client
/// (`Cancelled`, tonic's timeout) or on the server (`DeadlineExceeded`),
/// or the connection broke (`Unknown` with a transport cause).
fn is_retriable_code(code: i32) -> bool {
    const CANCELLED: i32 = 1;
    const UNKNOWN: i32 = 2;
    const DEADLINE_EXCEEDED: i32 = 4;
    const ABORTED: i32 = 10;
    const UNAVAILABLE: i32 = 14;
    matches!(
        code,
        CANCELLED | UNKNOWN | DEADLINE_EXCEEDED | ABORTED | UNAVAILABLE
    )
}

/// Runs `op` until it succeeds, fails with a non-retriable error, or the
/// next try would start after `deadline`. Pauses grow from 5 ms to 250 ms:
/// with several endpoints, a dead member fails only the share of requests
/// the client routes to it, so a quick retry usually lands elsewhere.
///
/// Only for requests that are safe to repeat (reads, and writes guarded
/// by a compare on a key unique to the caller).
pub(crate) async fn with_retries<T, F, Fut>(
    deadline: Instant,
    context: &str,
    mut op: F,
) -> Result<T, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let mut pauses = Backoff::exponential(FIRST_RETRY, LONGEST_RETRY).delays();
    loop {
        let error = match op().await {
            Ok(value) => return Ok(value),
            Err(error) => map_error(context, error),
        };
        match pauses.next() {
            Some(pause) if error.is_retriable() && Instant::now() + pause < deadline => {
                tracing::debug!(%error, "distlock: etcd request failed, retrying");
                tokio::time::sleep(pause).await;
            }
            _ => return Err(error),
        }
    }
}

/// Runs a transaction, retrying while the cluster is unavailable (see
/// [`with_retries`]: only transactions safe to repeat).
pub(crate) async fn run_txn(
    client: &Client,
    deadline: Instant,
    context: &str,
    txn: Txn,
) -> Result<TxnResponse, LockError> {
    with_retries(deadline, context, || {
        let mut kv = client.kv_client();
        let txn = txn.clone();
        async move { kv.txn(txn).await }
    })
    .await
}

/// The range reads of a transaction's answer, in the order of the
/// transaction's operations.
pub(crate) fn range_reads(response: &TxnResponse) -> impl Iterator<Item = GetResponse> {
    response
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        })
}

/// What a [`delete_key`] found.
pub(crate) struct KeyDeleted {
    /// The key was there and is gone.
    pub(crate) deleted: bool,
    /// The first try was answered: no request naming the key is left
    /// anywhere (see [`crate::names`]).
    pub(crate) first_answered: bool,
}

/// Deletes `key` with a plain delete, retrying until `deadline`. Only for
/// our own queue entries, whose names are not handed out again while a
/// request naming them may be in flight.
pub(crate) async fn delete_key(
    client: &Client,
    key: &[u8],
    context: &str,
    deadline: Instant,
) -> Result<KeyDeleted, LockError> {
    let mut tries = 0u32;
    let response = with_retries(deadline, context, || {
        tries += 1;
        let mut kv = client.kv_client();
        let key = key.to_vec();
        async move { kv.delete(key, None).await }
    })
    .await?;
    Ok(KeyDeleted {
        deleted: response.deleted() > 0,
        first_answered: tries == 1,
    })
}
