//! Sessions: one etcd lease per backend and ttl, kept alive in the
//! background, on which every queue entry of that backend hangs.
//!
//! Holding many locks therefore costs one keepalive request every ttl/3,
//! whatever their number. The lease is granted on the first acquire. It is
//! lost when a keepalive answer says `ttl == 0` (revoked or expired), when
//! a new keepalive stream finds the lease gone, or when no keepalive
//! succeeded before the lease's deadline (counted from when the last
//! successful keepalive was *sent*, so this process gives up before the
//! server can have expired it). Then every registered [`LossReporter`]
//! hears [`LossReason::SessionExpired`] and the next acquire grants a new
//! lease.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use etcd_client::{Client, LeaseClient, LeaseKeepAliveStream, LeaseKeeper};
use lock_core::backend::{clock_drift, spawn_detached, LossReporter};
use lock_core::{LockError, LossReason};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::client::with_retries;

/// The sessions of one backend, one per lease ttl (in whole seconds).
pub(crate) struct Sessions {
    client: Client,
    response_timeout: Duration,
    by_ttl: Mutex<HashMap<i64, Arc<Session>>>,
}

impl Sessions {
    pub(crate) fn new(client: Client, response_timeout: Duration) -> Self {
        Self {
            client,
            response_timeout,
            by_ttl: Mutex::new(HashMap::new()),
        }
    }

    /// A live lease for `ttl` (rounded up to whole seconds, as etcd counts),
    /// granted now if there is none; grant requests are retried until
    /// `deadline`.
    pub(crate) async fn lease(
        &self,
        ttl: Duration,
        deadline: Instant,
    ) -> Result<Arc<Lease>, LockError> {
        let seconds = whole_seconds(ttl);
        let session = {
            let mut by_ttl = self.by_ttl.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(by_ttl.entry(seconds).or_insert_with(|| {
                Arc::new(Session {
                    client: self.client.clone(),
                    ttl_seconds: seconds,
                    response_timeout: self.response_timeout,
                    current: tokio::sync::Mutex::new(None),
                })
            }))
        };
        session.lease(deadline).await
    }

    /// A lease of its own for `ttl`, granted now and kept alive like a
    /// session's, for one hold only: revoked when the last `Arc` of it is
    /// dropped (or by [`Lease::revoke`]). Grant requests are retried until
    /// `deadline`.
    pub(crate) async fn own_lease(
        &self,
        ttl: Duration,
        deadline: Instant,
    ) -> Result<Arc<Lease>, LockError> {
        grant(
            &self.client,
            whole_seconds(ttl),
            self.response_timeout,
            deadline,
        )
        .await
    }
}

/// `ttl` in whole seconds, rounded up, at least 1: what etcd counts in.
fn whole_seconds(ttl: Duration) -> i64 {
    let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(seconds.max(1)).unwrap_or(i64::MAX)
}

/// Grants a lease of `ttl_seconds` and starts keeping it alive; grant
/// requests are retried until `deadline`.
async fn grant(
    client: &Client,
    ttl_seconds: i64,
    response_timeout: Duration,
    deadline: Instant,
) -> Result<Arc<Lease>, LockError> {
    let sent = Instant::now();
    let granted = with_retries(deadline, "cannot grant an etcd lease", || {
        let mut leases = client.lease_client();
        async move { leases.grant(ttl_seconds, None).await }
    })
    .await?;
    // etcd may grant more than asked (its minimum is 1.5 × the election
    // timeout, rounded up): the granted ttl is the one that counts.
    let ttl = Duration::from_secs(u64::try_from(granted.ttl()).unwrap_or(1).max(1));
    Ok(Lease::start(
        client,
        granted.id(),
        ttl,
        sent,
        response_timeout,
    ))
}

/// Leases of one ttl, one at a time.
struct Session {
    client: Client,
    ttl_seconds: i64,
    response_timeout: Duration,
    /// An async mutex: concurrent first acquires wait for one grant.
    current: tokio::sync::Mutex<Option<Arc<Lease>>>,
}

impl Session {
    async fn lease(&self, deadline: Instant) -> Result<Arc<Lease>, LockError> {
        let mut current = self.current.lock().await;
        if let Some(lease) = current.as_ref().filter(|l| !l.is_lost()) {
            return Ok(Arc::clone(lease));
        }
        let lease = grant(
            &self.client,
            self.ttl_seconds,
            self.response_timeout,
            deadline,
        )
        .await?;
        *current = Some(Arc::clone(&lease));
        Ok(lease)
    }
}

impl fmt::Debug for Sessions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let by_ttl = self.by_ttl.lock().unwrap_or_else(|p| p.into_inner());
        let ttls: Vec<_> = by_ttl.keys().collect();
        f.debug_struct("Sessions").field("ttls", &ttls).finish()
    }
}

/// One granted lease and the locks that hang on it.
pub(crate) struct Lease {
    id: i64,
    ttl: Duration,
    client: Client,
    state: Mutex<LeaseState>,
    /// Until when the lease is surely alive on the server, as the keepalive
    /// task last confirmed it.
    valid_until: Mutex<Instant>,
    lost: watch::Sender<bool>,
    keeper: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct LeaseState {
    lost: bool,
    reporters: Vec<LossReporter>,
}

impl Lease {
    fn start(
        client: &Client,
        id: i64,
        ttl: Duration,
        granted_at: Instant,
        response_timeout: Duration,
    ) -> Arc<Self> {
        let valid_until = granted_at + ttl.saturating_sub(clock_drift(ttl));
        let lease = Arc::new(Self {
            id,
            ttl,
            client: client.clone(),
            state: Mutex::new(LeaseState::default()),
            valid_until: Mutex::new(valid_until),
            lost: watch::Sender::new(false),
            keeper: Mutex::new(None),
        });
        let keeper = KeepAlive {
            lease: Arc::downgrade(&lease),
            client: client.lease_client(),
            id,
            ttl,
            valid_until,
            response_timeout,
        };
        let task = tokio::spawn(keeper.run());
        *lease.keeper.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        lease
    }

    /// The lease id.
    pub(crate) fn id(&self) -> i64 {
        self.id
    }

    /// Until when the lease is surely alive on the server: the last
    /// successful keepalive's send time plus the ttl it returned, minus
    /// drift.
    pub(crate) fn valid_until(&self) -> Instant {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True once the lease is known to be gone.
    pub(crate) fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Resolves when the lease is lost.
    pub(crate) fn lost_signal(&self) -> watch::Receiver<bool> {
        self.lost.subscribe()
    }

    /// Records that etcd no longer knows this lease (a write attached to
    /// it was refused) before the keepalive noticed.
    pub(crate) fn gone(&self) {
        self.mark_lost(false);
    }

    /// Reports the loss of this lease to `reporter` when it happens.
    /// Returns false (registering nothing) if the lease is lost already.
    pub(crate) fn register(&self, reporter: LossReporter) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.lost {
            return false;
        }
        // Forget released and abandoned locks now and then (amortised O(1)).
        if state.reporters.len() >= 64 && state.reporters.len().is_power_of_two() {
            state.reporters.retain(|r| r.is_held() && !r.is_abandoned());
        }
        state.reporters.push(reporter);
        true
    }

    /// Marks the lease lost and tells every lock on it. With `revoke`, also
    /// asks etcd to revoke it, in case it is still alive there (this
    /// process gave up on it, e.g. after a pause or a partition): its
    /// entries must not block others until it expires.
    fn mark_lost(&self, revoke: bool) {
        let reporters = {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if state.lost {
                return;
            }
            state.lost = true;
            std::mem::take(&mut state.reporters)
        };
        self.lost.send_replace(true);
        tracing::warn!(lease = self.id, "distlock: etcd session lease lost");
        for reporter in reporters {
            reporter.report(LossReason::SessionExpired);
        }
        if revoke {
            self.revoke_in_background();
        }
    }

    /// Asks etcd to revoke the lease now (which deletes every key on it),
    /// then stops keeping it alive: for a lease of one hold, given back
    /// with the hold. A revoke that fails is left to [`Drop`], which
    /// tries once more in the background; the lease expires anyway.
    pub(crate) async fn revoke(&self, deadline: Instant) {
        let revoked = with_retries(deadline, "cannot revoke an etcd lease", || {
            let mut leases = self.client.lease_client();
            async move { leases.revoke(self.id).await }
        })
        .await;
        if revoked.is_ok() {
            // Nothing left to report to: the hold was given back.
            self.state.lock().unwrap_or_else(|p| p.into_inner()).lost = true;
            self.lost.send_replace(true);
        }
    }

    fn revoke_in_background(&self) {
        let mut leases = self.client.lease_client();
        let id = self.id;
        spawn_detached(None, async move {
            let _ = leases.revoke(id).await;
        });
    }
}

impl Drop for Lease {
    /// The last lock and the backend are gone: stop the keepalive and
    /// revoke the lease, which frees any entry still on it at once.
    fn drop(&mut self) {
        if let Some(task) = self
            .keeper
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            task.abort();
        }
        if !self.is_lost() {
            self.revoke_in_background();
        }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("id", &format_args!("{:x}", self.id))
            .field("ttl", &self.ttl)
            .field("lost", &self.is_lost())
            .finish()
    }
}

/// The keepalive task of one lease.
struct KeepAlive {
    lease: Weak<Lease>,
    client: LeaseClient,
    id: i64,
    ttl: Duration,
    /// Until when the lease is surely alive on the server.
    valid_until: Instant,
    response_timeout: Duration,
}

/// Pauses between attempts to reopen a keepalive stream.
const REOPEN_PAUSE: Duration = Duration::from_millis(100);

enum Ended {
    /// etcd says the lease is gone.
    Gone,
    /// No keepalive succeeded in time; the lease may still exist.
    TimedOut,
}

impl KeepAlive {
    async fn run(mut self) {
        let ended = self.keep_alive().await;
        if let Some(lease) = self.lease.upgrade() {
            lease.mark_lost(matches!(ended, Ended::TimedOut));
        }
    }

    /// Renews at ttl/3 over a stream, reopening it when it breaks, until
    /// the lease is gone or its deadline passes.
    async fn keep_alive(&mut self) -> Ended {
        loop {
            if Instant::now() >= self.valid_until {
                return Ended::TimedOut;
            }
            let sent = Instant::now();
            // Opening a stream sends a first keepalive and waits for it.
            let opened =
                tokio::time::timeout_at(self.valid_until.into(), self.client.keep_alive(self.id))
                    .await;
            match opened {
                Err(_) => return Ended::TimedOut,
                Ok(Ok((keeper, stream))) => {
                    self.renewed(sent, self.ttl);
                    if let Some(ended) = self.stream(keeper, stream).await {
                        return ended;
                    }
                }
                Ok(Err(etcd_client::Error::LeaseKeepAliveError(reason)))
                    if reason.contains("not found") =>
                {
                    return Ended::Gone
                }
                Ok(Err(error)) => {
                    tracing::debug!(%error, "distlock: cannot open an etcd keepalive stream");
                    let pause = Instant::now() + REOPEN_PAUSE;
                    tokio::time::sleep_until(pause.min(self.valid_until).into()).await;
                }
            }
        }
    }

    /// Keeps one stream going. `None` when it broke and must be reopened.
    async fn stream(
        &mut self,
        mut keeper: LeaseKeeper,
        mut stream: LeaseKeepAliveStream,
    ) -> Option<Ended> {
        let interval = self.ttl / 3;
        let mut next = Instant::now() + interval;
        let mut outstanding: Option<Instant> = None;
        loop {
            tokio::select! {
                biased;
                () = tokio::time::sleep_until(self.valid_until.into()) => return Some(Ended::TimedOut),
                message = stream.message() => match message {
                    Ok(Some(answer)) if answer.ttl() <= 0 => return Some(Ended::Gone),
                    Ok(Some(answer)) => {
                        if let Some(sent) = outstanding.take() {
                            let ttl = Duration::from_secs(answer.ttl().unsigned_abs());
                            self.renewed(sent, ttl);
                        }
                    }
                    Ok(None) | Err(_) => return None,
                },
                () = tokio::time::sleep_until(next.into()) => {
                    let now = Instant::now();
                    next = now + interval;
                    match outstanding {
                        // An unanswered keepalive: the stream is stuck.
                        Some(sent) if now - sent >= self.response_timeout => return None,
                        Some(_) => {}
                        None => {
                            if keeper.keep_alive().await.is_err() {
                                return None;
                            }
                            outstanding = Some(now);
                        }
                    }
                }
            }
        }
    }

    /// A keepalive sent at `sent` succeeded with `ttl` left.
    fn renewed(&mut self, sent: Instant, ttl: Duration) {
        let until = sent + ttl.saturating_sub(clock_drift(ttl));
        self.valid_until = self.valid_until.max(until);
        if let Some(lease) = self.lease.upgrade() {
            *lease.valid_until.lock().unwrap_or_else(|p| p.into_inner()) = self.valid_until;
        }
    }
}
