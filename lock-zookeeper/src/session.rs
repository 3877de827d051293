//! One ZooKeeper session per backend, and the loss of its locks.
//!
//! Every lock a backend holds is an ephemeral node of its one session, so
//! the session's fate is theirs. A monitor task follows the session state:
//!
//! * `Expired` (or the session otherwise ending): the server has deleted
//!   our ephemeral nodes, so every registered lock is reported lost with
//!   [`LossReason::SessionExpired`] at once, and the next call opens a
//!   fresh session.
//! * `Disconnected` for longer than the validity window: the server may
//!   have expired the session without our knowing (we learn of expiry only
//!   when we reconnect), so the locks are reported lost with
//!   [`LossReason::ValidityExpired`] before anybody else can have been
//!   given them. See [`validity_window`].

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lock_core::backend::{clock_drift, spawn_detached, LossReporter};
use lock_core::{LockError, LossReason};
use zookeeper_client::{Acls, Client, Error as ZkError, SessionState, StateWatcher};

use crate::config::ZkConfig;
use crate::contended::ContendedDirs;
use crate::delayed::DelayedWatches;
use crate::error;

/// Sessions set up as the store's own, for tools that talk to the same
/// servers with raw commands, such as benchmarks. The store opens its own
/// sessions with these too.
impl ZkConfig {
    /// A client set up as the store's own (same servers, session timeout,
    /// digest credentials, TLS): a new session on the ensemble, opened
    /// within the connect timeout. For tools that talk to the same
    /// servers with raw commands, such as benchmarks; nodes they create
    /// should carry [`acls`](Self::acls), as the store's do.
    ///
    /// # Errors
    ///
    /// [`LockError::Unavailable`] when no server accepts a session within
    /// the connect timeout, and [`LockError::InvalidConfig`] when the
    /// hosts are not ZooKeeper (or not TLS as the URL says, or the TLS
    /// handshake fails), each naming the hosts, what failed and what to
    /// try; [`LockError::PermissionDenied`] when the server refuses the
    /// credentials.
    pub async fn connect(&self) -> Result<Client, LockError> {
        let hosts = self.connect_string();
        let mut connector = Client::connector()
            .with_session_timeout(self.session_timeout)
            // Fail at once when no server accepts, rather than retrying
            // until the session timeout; reconnects later still cycle.
            .with_fail_eagerly();
        if let Some(auth) = &self.auth {
            connector = connector.with_auth("digest", &auth.auth_bytes());
        }
        let connecting = crate::tls::connect(connector, self, &hosts);
        let error = match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(client)) => return Ok(client),
            Ok(Err(e)) => error::map(&format!("open a session with {hosts}"), e),
            Err(_) => error::disconnected(&hosts, self.connect_timeout),
        };
        Err(crate::diagnosis::explain(self, error).await)
    }

    /// The ACLs the store creates every node with: readable and writable
    /// only by the same credentials when the URL gave some, by anyone
    /// otherwise.
    pub fn acls(&self) -> Acls<'static> {
        if self.auth.is_some() {
            Acls::creator_all()
        } else {
            Acls::anyone_all()
        }
    }
}

/// One ZooKeeper session and the locks that live and die with it.
///
/// It is the session's only client handle: whatever sends requests or
/// holds watches in the background (a clean-up, an own-node watch) holds
/// the `Session`. Dropping the last one closes the session once every
/// request sent before has been answered (see [`close_when_answered`]).
#[derive(Debug)]
pub(crate) struct Session {
    client: Client,
    config: Arc<ZkConfig>,
    registry: Arc<Registry>,
    contended: ContendedDirs,
    delayed_watches: DelayedWatches<Session>,
    /// When the latest request known to have reached the server with the
    /// session alive was sent (see [`crate::sessions`]).
    confirmed_at: Mutex<Instant>,
    /// The runtime the session was opened on: its close runs there if the
    /// last handle goes outside any runtime.
    runtime: Option<tokio::runtime::Handle>,
}

impl Session {
    /// Connects to the ensemble within the connect timeout.
    pub(crate) async fn open(config: Arc<ZkConfig>) -> Result<Self, LockError> {
        let sent = Instant::now();
        let client = config.connect().await?;
        let registry = Arc::new(Registry::default());
        let window = validity_window(client.session_timeout());
        // Not aborted when the session is dropped: dropping the last client
        // closes the session and the monitor ends on seeing `Closed`.
        // Cancelling a task that waits on the session state while the
        // client's session task drops that state races inside
        // zookeeper-client's sync primitives (asyncs-sync 0.4.0 panics
        // with "unpark twice").
        tokio::spawn(monitor(
            client.state_watcher(),
            Arc::clone(&registry),
            window,
        ));
        tracing::debug!(session = %client.session_id(), timeout = ?client.session_timeout(), "distlock: ZooKeeper session opened");
        Ok(Self {
            client,
            config,
            registry,
            contended: ContendedDirs::default(),
            delayed_watches: DelayedWatches::default(),
            confirmed_at: Mutex::new(sent),
            runtime: tokio::runtime::Handle::try_current().ok(),
        })
    }

    /// Until when the server surely keeps the session, given that a
    /// request sent at `floor` reached it with the session alive: the
    /// server expires a session one session timeout after it last heard
    /// from it, so a reply to a request sent at `t` proves it alive until
    /// `t + timeout` (less clock drift). The later of `floor` and the
    /// latest confirmation counts.
    pub(crate) fn surely_alive_until(&self, floor: Instant) -> Instant {
        let confirmed = *self.confirmed_at.lock().unwrap_or_else(|p| p.into_inner());
        let timeout = self.client.session_timeout();
        confirmed.max(floor) + timeout.saturating_sub(clock_drift(timeout))
    }

    /// Records that a request sent at `sent` was answered with the
    /// session alive.
    pub(crate) fn confirmed(&self, sent: Instant) {
        let mut confirmed_at = self.confirmed_at.lock().unwrap_or_else(|p| p.into_inner());
        *confirmed_at = (*confirmed_at).max(sent);
    }

    /// Where this session's latest acquisitions had to wait.
    pub(crate) fn contended(&self) -> &ContendedDirs {
        &self.contended
    }

    /// The own-node watches this session has yet to start.
    pub(crate) fn delayed_watches(&self) -> &DelayedWatches<Self> {
        &self.delayed_watches
    }

    /// The session's client.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The ACLs every node of this backend is created with: creator-only
    /// when the URL gave credentials, open otherwise.
    pub(crate) fn acls(&self) -> Acls<'static> {
        self.config.acls()
    }

    /// Whether some lock of this session is still held or awaited.
    pub(crate) fn has_live_locks(&self) -> bool {
        self.registry.has_live_locks()
    }

    /// Whether the session expired, failed or was closed.
    pub(crate) fn has_ended(&self) -> bool {
        self.registry.ended.load(Ordering::SeqCst) || self.client.state().is_terminated()
    }

    /// Reports `reporter`'s lock lost when this session ends. Register
    /// before creating the lock's node, so no expiry can slip between.
    pub(crate) fn register(&self, reporter: LossReporter) {
        self.registry.register(reporter);
    }

    /// Waits until the session is connected, at most the connect timeout.
    pub(crate) async fn ready(&self) -> Result<(), LockError> {
        wait_connected(&self.client, self.config.connect_timeout)
            .await
            .map_err(|state| self.state_error(state))
    }

    /// Runs one request, bounded so that a request queued while the client
    /// reconnects cannot hang a caller; a timeout counts as a lost reply.
    pub(crate) async fn request<T, E: From<ZkError>>(
        &self,
        request: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let limit = self.config.connect_timeout + self.client.session_timeout();
        tokio::time::timeout(limit, request)
            .await
            .unwrap_or_else(|_| Err(ZkError::Timeout.into()))
    }

    fn state_error(&self, state: SessionState) -> LockError {
        match state {
            SessionState::AuthFailed => error::map("authenticate", ZkError::AuthFailed),
            SessionState::Disconnected => {
                error::disconnected(&self.config.connect_string(), self.config.connect_timeout)
            }
            _ => error::map("use the session", ZkError::SessionExpired),
        }
    }
}

/// How long the session may stay disconnected before its locks count as
/// lost: the session timeout, less how stale our last word from the server
/// may already be when the client declares the connection lost, less
/// clock drift.
///
/// zookeeper-client 0.11 (with no connection timeout configured, as here)
/// declares a connection lost after `2/5` of the negotiated session timeout
/// without a reply, checked every `1/20` of it. The server expires the
/// session one session timeout after it last heard from us, which is no
/// earlier than our last reply. So the server cannot have expired the
/// session before `disconnect + (1 − 2/5 − 1/20) × timeout`.
pub(crate) fn validity_window(session_timeout: Duration) -> Duration {
    (session_timeout * 11 / 20).saturating_sub(clock_drift(session_timeout))
}

/// Waits until `client` is connected, at most `limit`; the state it ended
/// in otherwise.
pub(crate) async fn wait_connected(client: &Client, limit: Duration) -> Result<(), SessionState> {
    let mut states = client.state_watcher();
    let mut state = client.state();
    let deadline = Instant::now() + limit;
    loop {
        match state {
            SessionState::SyncConnected | SessionState::ConnectedReadOnly => return Ok(()),
            SessionState::Disconnected => {
                match tokio::time::timeout_at(deadline.into(), states.changed()).await {
                    Ok(next) => state = next,
                    Err(_) => return Err(SessionState::Disconnected),
                }
            }
            ended => return Err(ended),
        }
    }
}

/// The locks of one session, to be told when it is lost.
#[derive(Debug, Default)]
struct Registry {
    reporters: Mutex<Reporters>,
    ended: AtomicBool,
    /// Set when our [`Session`] is dropped: no guard can hold a lock of
    /// this session any more (each keeps the session alive), so however
    /// the client library reports the end, nothing is lost.
    closing: AtomicBool,
}

#[derive(Debug, Default)]
struct Reporters {
    live: Vec<LossReporter>,
    /// Prune released and abandoned entries once `live` reaches this size,
    /// so registering stays O(1) amortized with many held locks.
    prune_at: usize,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, Reporters> {
        self.reporters.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(&self, reporter: LossReporter) {
        let mut reporters = self.lock();
        if self.ended.load(Ordering::SeqCst) {
            drop(reporters);
            reporter.report(LossReason::SessionExpired);
            return;
        }
        if reporters.live.len() >= reporters.prune_at {
            reporters.live.retain(|r| r.is_held() && !r.is_abandoned());
            reporters.prune_at = (reporters.live.len() * 2).max(64);
        }
        reporters.live.push(reporter);
    }

    /// Whether some registered lock is still held or awaited.
    fn has_live_locks(&self) -> bool {
        self.lock().live.iter().any(|r| r.is_held())
    }

    /// Reports every registered lock lost; returns how many were held.
    fn report_all(&self, reason: LossReason) -> usize {
        let reporters = std::mem::take(&mut self.lock().live);
        reporters.iter().filter(|r| r.report(reason)).count()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Before the client closes the session, so that the monitor takes
        // its end for what it is, however the library reports it.
        self.registry.closing.store(true, Ordering::SeqCst);
        let client = self.client.clone();
        let limit = self.config.connect_timeout;
        spawn_detached(self.runtime.as_ref(), close_when_answered(client, limit));
    }
}

/// Closes the session of `client` (the last handle of it) once every
/// request sent before this call has been answered, or after `limit`.
///
/// zookeeper-client sends its close request as soon as the last handle is
/// dropped, and treats a close whose reply is not the last one it awaits
/// as a lost connection: it reconnects, the server says the session
/// expired (it was closed), and the library logs two warnings. That
/// happens when a watch of ours fires while its removal is still on the
/// way: the library answers the notification with one more removal, sent
/// after the close. Removals are sent when a watcher is dropped, which a
/// session's last handle outlives by design (every holder of a watcher
/// holds the session), so they precede this probe; ZooKeeper answers a
/// session's requests in order, so a notification that crosses a removal
/// arrives before the probe's reply, and the removal it triggers is sent
/// before the close.
async fn close_when_answered(client: Client, limit: Duration) {
    let _ = tokio::time::timeout(limit, client.check_stat("/")).await;
}

/// Follows the session state; see the module docs.
async fn monitor(mut states: StateWatcher, registry: Arc<Registry>, window: Duration) {
    let mut lost_at: Option<Instant> = None;
    loop {
        let state = match lost_at {
            Some(at) => tokio::select! {
                state = states.changed() => state,
                () = tokio::time::sleep_until(at.into()) => {
                    let count = registry.report_all(LossReason::ValidityExpired);
                    tracing::warn!(count, ?window, "distlock: ZooKeeper disconnected past the validity window; locks lost");
                    lost_at = None;
                    continue;
                }
            },
            None => states.changed().await,
        };
        match state {
            SessionState::Disconnected => {
                lost_at.get_or_insert(Instant::now() + window);
            }
            SessionState::SyncConnected | SessionState::ConnectedReadOnly => lost_at = None,
            SessionState::Expired | SessionState::AuthFailed | SessionState::Closed => {
                registry.ended.store(true, Ordering::SeqCst);
                let count = registry.report_all(LossReason::SessionExpired);
                // We close a session only once the backend and every guard
                // (each keeps the session alive) are gone, so what is left
                // in the registry then is abandoned attempts: routine, even
                // when the close races a connection drop and the library
                // calls it `Expired`. Otherwise expiry costs someone a lock.
                if state == SessionState::Closed || registry.closing.load(Ordering::SeqCst) {
                    tracing::debug!(count, "distlock: ZooKeeper session closed");
                } else {
                    tracing::warn!(%state, count, "distlock: ZooKeeper session ended; its locks are lost");
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::backend::loss_channel;

    #[test]
    fn the_window_closes_before_the_server_can_expire_the_session() {
        let window = validity_window(Duration::from_secs(1));
        assert!(window < Duration::from_millis(550), "{window:?}");
        assert!(window > Duration::from_millis(500), "{window:?}");
    }

    #[test]
    fn an_ended_registry_reports_new_locks_at_once() {
        let registry = Registry::default();
        let (held, held_signal) = loss_channel();
        registry.register(held);
        assert_eq!(registry.report_all(LossReason::SessionExpired), 1);
        assert_eq!(held_signal.loss_reason(), Some(LossReason::SessionExpired));
        registry.ended.store(true, Ordering::SeqCst);
        let (late, late_signal) = loss_channel();
        registry.register(late);
        assert_eq!(late_signal.loss_reason(), Some(LossReason::SessionExpired));
    }

    #[test]
    fn abandoned_reporters_are_pruned() {
        let registry = Registry::default();
        for _ in 0..1000 {
            let (reporter, signal) = loss_channel();
            registry.register(reporter);
            drop(signal);
        }
        assert!(registry.lock().live.len() < 200);
    }
}
