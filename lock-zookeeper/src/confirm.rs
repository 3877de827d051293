//! Confirming a ZooKeeper session with the server, so that its guards can
//! tell, without waiting for any task, until when their locks are surely
//! theirs.

use std::sync::Weak;
use std::time::Instant;

use crate::session::Session;

/// Confirms the session every third of its timeout while it has locks
/// (held or awaited), with the cheapest request there is, so that
/// [`Session::surely_alive_until`] stays ahead of the clock. The client
/// library's own heartbeats keep the session; these only tell us, in a
/// form a guard can check without waiting for any task to run, that the
/// server heard us lately: a process frozen past the session timeout
/// wakes with that moment in the past, and its guards say so at once.
pub(crate) async fn confirm(session: Weak<Session>) {
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
