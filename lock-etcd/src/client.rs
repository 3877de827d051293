//! Connecting with `etcd-client`, turning its errors into [`LockError`]s,
//! and retrying requests that failed because a member was unreachable.

use std::error::Error as StdError;
use std::future::Future;
use std::time::{Duration, Instant};

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
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
    /// Authenticates at once when a user is configured, so wrong
    /// credentials fail here; otherwise connections are made on first
    /// use.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidConfig`] for refused credentials,
    /// [`LockError::Unavailable`] when no endpoint can be reached.
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
        let endpoints = self.endpoints.join(",");
        let mut context = format!("cannot connect to etcd at {endpoints}");
        if self.tls.as_ref().is_some_and(|tls| tls.identity.is_none()) {
            // A server with --client-cert-auth just drops the connection.
            context.push_str(" (no client certificate given: if the server requires one, set tls_cert_file and tls_key_file)");
        }
        Client::connect(&self.endpoints, Some(options))
            .await
            .map_err(|e| map_error(&context, e))
    }
}

/// Classifies an `etcd-client` error: unreachable members, timeouts and
/// elections are [`LockError::Unavailable`] (retriable); refused
/// credentials are [`LockError::InvalidConfig`]; the rest is
/// [`LockError::Backend`]. The message names `context` and the whole
/// cause chain (a TLS failure is buried a few levels down).
pub(crate) fn map_error(context: &str, error: etcd_client::Error) -> LockError {
    use etcd_client::Error as E;
    let message = format!("{context}: {}", chain(&error));
    let retriable = match &error {
        E::GRpcStatus(status) => {
            if status.message().contains("authentication failed") {
                return LockError::invalid_config(format!(
                    "{context}: etcd refused the user name or password ({})",
                    status.message()
                ));
            }
            if status.code() as i32 == PERMISSION_DENIED {
                return LockError::invalid_config(format!(
                    "{context}: etcd denied permission ({}): give a user and password \
                     whose role may read and write keys under `{}/`",
                    status.message(),
                    crate::keys::ROOT
                ));
            }
            // tonic is not a direct dependency: compare the numeric gRPC codes.
            is_retriable_code(status.code() as i32)
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

/// gRPC's code for "permission denied".
const PERMISSION_DENIED: i32 = 7;

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

/// `error` and its sources, joined with `: `, without repeats.
fn chain(error: &dyn StdError) -> String {
    let causes = std::iter::successors(error.source(), |&cause| cause.source());
    causes.fold(error.to_string(), |text, cause| {
        let shown = cause.to_string();
        if text.contains(&shown) {
            text
        } else {
            format!("{text}: {shown}")
        }
    })
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
