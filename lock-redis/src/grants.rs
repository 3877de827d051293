//! Hand-offs announced to the waiters of this process.
//!
//! A release (or a waiter giving up while holding) hands the lock to the
//! first live waiter of its queue inside the script and publishes
//! `"granted <token> <owner>"`. The pub/sub dispatcher posts the token on
//! the [`GrantBoard`] under the owner id and wakes only that waiter, which
//! then holds the lock without another round trip. Waiters of other owners
//! sleep on: a hand-off never wakes a herd.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use lock_core::backend::{WakeRegistry, WakeSubscription};
use lock_core::FencingToken;

/// The prefix of a grant message's payload.
const GRANTED: &str = "granted ";

/// Reads a grant message's payload: the token and the new owner.
pub(crate) fn parse_grant(payload: &[u8]) -> Option<(FencingToken, &str)> {
    let rest = std::str::from_utf8(payload).ok()?.strip_prefix(GRANTED)?;
    let (token, owner) = rest.split_once(' ')?;
    Some((FencingToken::new(token.parse().ok()?), owner))
}

/// The wake-up key of the waiter with `owner` id. Channel names start
/// with `distlock:`, so the two kinds of keys never meet.
fn wake_key(owner: &str) -> String {
    format!("granted/{owner}")
}

/// The local waiters of one backend, by owner id, with the token of a
/// hand-off announced to them and not yet taken.
#[derive(Clone, Default)]
pub(crate) struct GrantBoard {
    slots: Arc<Mutex<HashMap<String, Option<FencingToken>>>>,
    registry: WakeRegistry,
}

impl GrantBoard {
    /// A board waking its waiters through `registry`.
    pub(crate) fn new(registry: WakeRegistry) -> Self {
        Self {
            slots: Arc::default(),
            registry,
        }
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<String, Option<FencingToken>>> {
        // Every update is a single step; a poisoned map is still consistent.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a waiter with `owner` id until the ticket is dropped.
    pub(crate) fn ticket(&self, owner: &str) -> GrantTicket {
        self.slots().insert(owner.to_owned(), None);
        GrantTicket {
            board: self.clone(),
            owner: owner.to_owned(),
        }
    }

    /// Posts a hand-off of `token` to `owner` and wakes that waiter.
    /// Returns false (and does nothing) if no local waiter has that id.
    pub(crate) fn offer(&self, owner: &str, token: FencingToken) -> bool {
        {
            let mut slots = self.slots();
            let Some(slot) = slots.get_mut(owner) else {
                return false;
            };
            *slot = Some(token);
        }
        self.registry.wake(&wake_key(owner));
        true
    }

    /// Wakes every registered waiter (after a pub/sub disconnect, when a
    /// hand-off may have been missed: each asks the server again).
    pub(crate) fn wake_all(&self) {
        let owners: Vec<String> = self.slots().keys().cloned().collect();
        for owner in owners {
            self.registry.wake(&wake_key(&owner));
        }
    }
}

impl fmt::Debug for GrantBoard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrantBoard")
            .field("waiters", &self.slots().len())
            .finish()
    }
}

/// One waiter's place on the [`GrantBoard`].
#[derive(Debug)]
pub(crate) struct GrantTicket {
    board: GrantBoard,
    owner: String,
}

impl GrantTicket {
    /// Wake-ups for this waiter's hand-offs (and for disconnects).
    pub(crate) fn subscribe(&self) -> WakeSubscription {
        self.board.registry.subscribe(&wake_key(&self.owner))
    }

    /// The token of a hand-off announced to this waiter, once.
    pub(crate) fn take(&self) -> Option<FencingToken> {
        self.board
            .slots()
            .get_mut(&self.owner)
            .and_then(Option::take)
    }

    /// Forgets an announced hand-off that the server has since shown to
    /// be over: the lock is held by another owner with token `holder`, so
    /// any hand-off to us with a token up to `holder` has ended.
    pub(crate) fn forget_up_to(&self, holder: FencingToken) {
        if let Some(slot) = self.board.slots().get_mut(&self.owner) {
            if slot.is_some_and(|token| token <= holder) {
                *slot = None;
            }
        }
    }
}

impl Drop for GrantTicket {
    fn drop(&mut self) {
        self.board.slots().remove(&self.owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn grant_payloads() {
        assert_eq!(
            parse_grant(b"granted 42 host/7/abc"),
            Some((FencingToken::new(42), "host/7/abc"))
        );
        assert_eq!(parse_grant(b"released"), None);
        assert_eq!(parse_grant(b"granted x host"), None);
        assert_eq!(parse_grant(b"granted 42"), None);
    }

    #[tokio::test]
    async fn an_offer_wakes_only_its_owner_and_is_taken_once() {
        let board = GrantBoard::new(WakeRegistry::new());
        let (mine, other) = (board.ticket("a"), board.ticket("b"));
        let (mut woken, mut not_woken) = (mine.subscribe(), other.subscribe());
        assert!(board.offer("a", FencingToken::new(3)));
        assert!(!board.offer("nobody", FencingToken::new(4)));
        tokio::time::timeout(Duration::from_secs(1), woken.woken())
            .await
            .expect("the owner is woken");
        let quiet = tokio::time::timeout(Duration::from_millis(30), not_woken.woken()).await;
        assert!(quiet.is_err(), "another waiter was woken");
        assert_eq!(mine.take(), Some(FencingToken::new(3)));
        assert_eq!(mine.take(), None);
        assert_eq!(other.take(), None);
    }

    #[test]
    fn a_hand_off_the_server_shows_over_is_forgotten() {
        let board = GrantBoard::new(WakeRegistry::new());
        let ticket = board.ticket("a");
        board.offer("a", FencingToken::new(5));
        ticket.forget_up_to(FencingToken::new(4));
        assert_eq!(
            ticket.take(),
            Some(FencingToken::new(5)),
            "newer than the holder"
        );
        board.offer("a", FencingToken::new(5));
        ticket.forget_up_to(FencingToken::new(5));
        assert_eq!(ticket.take(), None);
    }

    #[test]
    fn a_dropped_ticket_leaves_the_board() {
        let board = GrantBoard::new(WakeRegistry::new());
        drop(board.ticket("a"));
        assert!(!board.offer("a", FencingToken::new(1)));
    }
}
