//! Candidates that keep taking turns as leader of one election, and a
//! referee that checks every turn: never two leaders whose leadership is
//! valid at once, every term above the one before (a fencing-checked
//! resource accepts each leader's write), and observers that never report a
//! term going backwards.

#![allow(dead_code)] // not every test binary uses every item

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use distlock_testkit::FencedResource;
use lock_core::{Leadership, LockOptions, Locker, LossSignal};
use tokio::task::JoinHandle;

/// How long a leader leads before proclaiming a new value, and again
/// before resigning.
const TURN: Duration = Duration::from_millis(25);
/// How long a candidate waits to lead before campaigning again.
const CAMPAIGN_WAIT: Duration = Duration::from_secs(5);

/// The referee of one election; see the module docs.
#[derive(Default)]
pub(crate) struct Referee {
    /// The latest leader: its term and its loss signal.
    current: Mutex<Option<(u64, LossSignal)>>,
    resource: FencedResource,
    terms: AtomicUsize,
    violations: Mutex<Vec<String>>,
    stop: AtomicBool,
}

impl Referee {
    fn current(&self) -> MutexGuard<'_, Option<(u64, LossSignal)>> {
        self.current.lock().unwrap()
    }

    fn violation(&self, what: String) {
        eprintln!("violation: {what}");
        self.violations.lock().unwrap().push(what);
    }

    /// `leader` has just begun to lead.
    fn took_over(&self, leader: &Leadership) {
        let term = leader.term().get();
        let mut current = self.current();
        if let Some((previous, signal)) = current.as_ref() {
            if signal.is_held() {
                self.violation(format!("term {term} began while term {previous} was held"));
            }
        }
        if let Err(e) = self.resource.write(term, "took over") {
            self.violation(format!("the first write of term {term} was refused: {e}"));
        }
        *current = Some((term, leader.loss_signal()));
        self.terms.fetch_add(1, Ordering::SeqCst);
    }

    /// `leader` writes again, if it still leads.
    fn write(&self, leader: &Leadership) {
        let current = self.current();
        if leader.is_held() {
            if let Err(e) = self.resource.write(leader.term().get(), "led") {
                self.violation(format!("a valid leader's write was refused: {e}"));
            }
        }
        drop(current);
    }

    /// `leader` is about to resign.
    fn stepping_down(&self, leader: &Leadership) {
        let mut current = self.current();
        if current.as_ref().map(|(term, _)| *term) == Some(leader.term().get()) {
            *current = None;
        }
    }

    /// How many terms began so far.
    pub(crate) fn terms(&self) -> usize {
        self.terms.load(Ordering::SeqCst)
    }

    /// Waits until `more` terms began after this call, at most `limit`.
    pub(crate) async fn wait_for_terms(&self, more: usize, limit: Duration) {
        let target = self.terms() + more;
        let started = tokio::time::Instant::now();
        while self.terms() < target {
            assert!(
                started.elapsed() < limit,
                "only {} of {more} more terms within {limit:?}",
                more + self.terms() - target
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the candidates and fails if anything went wrong.
    pub(crate) fn finish(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let violations = self.violations.lock().unwrap();
        assert!(violations.is_empty(), "{violations:#?}");
    }
}

/// A candidate on `locker` that campaigns, leads for a [`TURN`],
/// proclaims a new value (which must not hand the leadership over), leads
/// for another turn and resigns, over and over until the referee stops it;
/// errors (a store unreachable for a while) make it campaign again.
pub(crate) fn candidate(locker: Locker, name: String, referee: Arc<Referee>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let election = locker.election("leader").unwrap();
        let options = LockOptions::new().wait(CAMPAIGN_WAIT);
        while !referee.stop.load(Ordering::SeqCst) {
            let leader = match election.campaign_with(name.as_str(), options.clone()).await {
                Ok(leader) => leader,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            referee.took_over(&leader);
            tokio::time::sleep(TURN).await;
            let _ = leader.proclaim(format!("{name}, proclaimed")).await;
            tokio::time::sleep(TURN).await;
            referee.write(&leader);
            referee.stepping_down(&leader);
            let _ = leader.resign().await;
        }
    })
}

/// An observer on `locker` that fails the referee if the election's
/// leader term ever goes backwards in what it reports.
pub(crate) fn observer(locker: Locker, referee: Arc<Referee>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut leaders = locker.election("leader").unwrap().observe();
        let mut last = 0;
        while !referee.stop.load(Ordering::SeqCst) {
            let Some(leader) = leaders.changed().await else {
                continue;
            };
            let term = leader.term.get();
            if term < last {
                referee.violation(format!("an observer saw term {term} after {last}"));
            }
            last = term;
        }
    })
}
