//! The backend's session: opened lazily, replaced once it has ended, and
//! confirmed with the server while it has locks, so that its guards can
//! tell, without waiting for any task, until when their locks are surely
//! theirs.

use std::sync::{Arc, Weak};
use std::time::Instant;

use lock_core::LockError;

use crate::config::ZkConfig;
use crate::session::Session;

/// Opens the backend's session lazily and replaces it once it has ended.
#[derive(Debug)]
pub(crate) struct Sessions {
    config: Arc<ZkConfig>,
    current: tokio::sync::Mutex<Option<Arc<Session>>>,
}

impl Sessions {
    /// The sessions of a backend configured by `config`; the first is
    /// opened by the first [`get`](Self::get).
    pub(crate) fn new(config: Arc<ZkConfig>) -> Self {
        Self {
            config,
            current: tokio::sync::Mutex::new(None),
        }
    }

    /// The live, connected session: the current one if it has not ended
    /// (waiting up to the connect timeout for a lost connection to come
    /// back), else a new one.
    pub(crate) async fn get(&self) -> Result<Arc<Session>, LockError> {
        let mut current = self.current.lock().await;
        if let Some(session) = current.as_ref().filter(|s| !s.has_ended()) {
            let session = Arc::clone(session);
            drop(current);
            session.ready().await?;
            return Ok(session);
        }
        let session = Arc::new(Session::open(Arc::clone(&self.config)).await?);
        tokio::spawn(confirm(Arc::downgrade(&session)));
        *current = Some(Arc::clone(&session));
        Ok(session)
    }
}

/// Confirms the session every third of its timeout while it has locks
/// (held or awaited), with the cheapest request there is, so that
/// [`Session::surely_alive_until`] stays ahead of the clock. The client
/// library's own heartbeats keep the session; these only tell us, in a
/// form a guard can check without waiting for any task to run, that the
/// server heard us lately: a process frozen past the session timeout
/// wakes with that moment in the past, and its guards say so at once.
async fn confirm(session: Weak<Session>) {
    loop {
        let period = match session.upgrade() {
            Some(session) => session.client().session_timeout() / 3,
            None => return,
        };
        tokio::time::sleep(period).await;
        let Some(session) = session.upgrade() else {
            return;
        };
        if session.has_ended() {
            return;
        }
        if !session.has_live_locks() {
            continue;
        }
        let sent = Instant::now();
        if session
            .request(session.client().check_stat("/"))
            .await
            .is_ok()
        {
            session.confirmed(sent);
        }
    }
}
