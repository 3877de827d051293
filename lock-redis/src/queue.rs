//! Waiting in line for a lock on one instance or a cluster (and, the
//! same way, for a read lock or a semaphore's permit: see
//! [`shared`](crate::shared)).
//!
//! A waiter that finds the lock held joins the lock's queue on the server
//! (inside the acquire script): its owner id goes to the back of a list,
//! with a liveness deadline [`WAITER_LIFE`] ahead and its lease in a hash.
//! A release hands the lock straight to the first waiter whose deadline
//! has not passed and announces it (see [`grants`](crate::grants)), so the
//! next holder holds without a round trip and in order of arrival. While
//! it waits, a waiter renews its deadline with each retry, which comes
//! at least every [`WAITER_LIFE`]/3; a waiter that died drops out of line
//! within [`WAITER_LIFE`]. One that is handed the lock just before dying
//! holds it until its lease runs out, like a holder killed after taking it.
//!
//! A lock that expired (its holder vanished) is free with waiters still in
//! line; the first to ask after that takes it, as the waiters wake at the
//! holder's expiry anyway.
//!
//! A waiter that gives up (deadline, error, dropped call) leaves the
//! queue, and if a hand-off reached it meanwhile, passes the lock on.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lock_core::backend::{AcquireRequest, Attempt, Backoff, TryAcquire, WakeSubscription};
use lock_core::{LockError, LockName};

use crate::abandon::LeaveOnDrop;
use crate::acquire::{acquired, attempt, QueueMode};
use crate::core::{RedisCore, WAITER_LIFE};
use crate::grants::GrantTicket;
use crate::keys::LockKeys;
use crate::pubsub::Listening;
use crate::scripts::AcquireReply;

/// How soon a waiter retries when the channel cannot be subscribed
/// (pub/sub connection down) and the holder's lease is longer.
const POLL_WITHOUT_NOTIFICATIONS: Duration = Duration::from_millis(100);

/// One acquisition on a backend's [`RedisCore`], from its first attempt
/// until it holds the lock or gives up.
pub(crate) struct QueuedWait<'a> {
    core: &'a Arc<RedisCore>,
    keys: LockKeys,
    ticket: GrantTicket,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// When the latest attempt that found the lock held by another was
    /// sent (`None` until an attempt put us in line): a hand-off announced
    /// later happened after it, so the lease it set is counted from no
    /// earlier than this.
    refused_at: Option<Instant>,
    /// Takes us out of line unless the acquisition succeeds.
    leave: Option<LeaveOnDrop>,
}

impl<'a> QueuedWait<'a> {
    /// Starts an acquisition of `request`'s lock. No network traffic.
    pub(crate) fn new(core: &'a Arc<RedisCore>, request: &AcquireRequest) -> Self {
        Self {
            core,
            keys: core.keys(&request.name),
            ticket: core.listener.ticket(request.owner.as_str()),
            state: Mutex::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update is a single step; a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The acquisition holds the lock: stay out of the clean-up.
    pub(crate) fn succeeded(&self) {
        if let Some(leave) = self.state().leave.take() {
            leave.disarm();
        }
    }

    /// One run of the acquire script; keeps our place in line current.
    async fn attempt(&self, request: &AcquireRequest) -> Result<Attempt, LockError> {
        let joined = self.state().refused_at.is_some();
        let mode = match (request.wait.may_wait(), joined) {
            (false, _) => QueueMode::Never,
            (true, false) => QueueMode::Join,
            (true, true) => QueueMode::Joined,
        };
        let (reply, at) = attempt(self.core, &self.keys, request, mode).await?;
        match reply {
            AcquireReply::Acquired(token) => {
                Ok(acquired(self.core, self.keys.clone(), request, token, at))
            }
            AcquireReply::Held { pttl, holder } => {
                if mode != QueueMode::Never {
                    self.queued(request, at);
                }
                self.ticket.forget_up_to(holder);
                Ok(Attempt::Held {
                    retry_after: Some(renew_place_within(request.ttl, pttl)),
                })
            }
        }
    }

    /// Records that an attempt sent at `at` found the lock held and put
    /// us in line.
    fn queued(&self, request: &AcquireRequest, at: Instant) {
        let mut state = self.state();
        state.refused_at = Some(at);
        if state.leave.is_none() {
            state.leave = Some(LeaveOnDrop::new(
                self.core,
                &self.keys,
                request.owner.as_str(),
                request.ttl,
                request.kind,
            ));
        }
    }
}

/// How long a waiter may sleep: until the holder's lease ends (it may
/// expire without a release), and never so long that its place in line
/// lapses or that a hand-off's lease, counted from the latest refusal,
/// would be mostly over when it is taken.
fn renew_place_within(ttl: Duration, pttl: Option<Duration>) -> Duration {
    let bound = (WAITER_LIFE / 3).min(ttl / 4);
    pttl.map_or(bound, |pttl| pttl.min(bound))
}

/// Whether a hand-off heard `now` may be taken without asking the server:
/// only while at least half of the lease, counted from our latest refusal
/// (`refused_at`), is left. Returns the instant the lease counts from.
fn fresh_hand_off(refused_at: Option<Instant>, ttl: Duration, now: Instant) -> Option<Instant> {
    refused_at.filter(|&at| now.saturating_duration_since(at) < ttl / 2)
}

#[async_trait]
impl TryAcquire for QueuedWait<'_> {
    async fn watch_releases(&self, _name: &LockName) -> Result<WakeSubscription, LockError> {
        Ok(self.ticket.subscribe())
    }

    async fn try_acquire_once(&self, request: &AcquireRequest) -> Result<Attempt, LockError> {
        if let Some(token) = self.ticket.take() {
            // Handed over by a release: the lease was set after our latest
            // refusal, so counting it from there errs on the safe side. A
            // hand-off heard late (this process stalled) may be over
            // already: then the server is asked, which also restarts the
            // lease if it is still ours.
            let refused_at = self.state().refused_at;
            if let Some(at) = fresh_hand_off(refused_at, request.ttl, Instant::now()) {
                return Ok(acquired(self.core, self.keys.clone(), request, token, at));
            }
        }
        let first = self.attempt(request).await?;
        if matches!(first, Attempt::Acquired(_)) || !request.wait.may_wait() {
            return Ok(first);
        }
        // We are in line: make sure a hand-off is heard from now on.
        let listener = &self.core.listener;
        match listener.ensure_listening(listener.grant_channel()).await {
            Listening::Already => Ok(first),
            // A hand-off may have come before the subscription: the next
            // attempt finds the lock ours if so.
            Listening::Now => self.attempt(request).await,
            Listening::Unavailable => Ok(Attempt::Held {
                retry_after: Some(POLL_WITHOUT_NOTIFICATIONS),
            }),
        }
    }

    fn poll_policy(&self) -> Backoff {
        // A safety net only: hand-offs are announced, expiry is covered by
        // the holder's PTTL, and places in line are renewed at
        // `renew_place_within`.
        Backoff::exponential(Duration::from_millis(100), Duration::from_secs(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_off_heard_late_is_checked_with_the_server() {
        let ttl = Duration::from_secs(10);
        let refused = Instant::now();
        let soon = refused + Duration::from_secs(1);
        assert_eq!(fresh_hand_off(Some(refused), ttl, soon), Some(refused));
        let late = refused + Duration::from_secs(5);
        assert_eq!(fresh_hand_off(Some(refused), ttl, late), None);
        assert_eq!(fresh_hand_off(None, ttl, soon), None, "never refused");
    }

    #[test]
    fn a_waiter_renews_its_place_before_it_lapses() {
        let long = Duration::from_secs(30);
        assert_eq!(renew_place_within(long, None), WAITER_LIFE / 3);
        assert_eq!(renew_place_within(long, Some(long)), WAITER_LIFE / 3);
        assert_eq!(
            renew_place_within(long, Some(Duration::from_millis(200))),
            Duration::from_millis(200)
        );
        assert_eq!(
            renew_place_within(Duration::from_secs(1), Some(long)),
            Duration::from_millis(250)
        );
    }
}
