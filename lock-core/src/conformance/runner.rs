//! Running cases: one at a time inside `cargo test`, or all of them against
//! a live deployment.
//!
//! Cases run side by side, but never more at once than their lockers fit
//! in [`MAX_LOCKERS_AT_ONCE`]: every locker is a connection or session of
//! its own, and a store may cap how many one client address opens
//! (ZooKeeper accepts 60 by default). The cap holds across every
//! [`run_case`] and [`run_all`] of a process, so `cargo test` on a machine
//! with many cores queues cases instead of opening more.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::{Semaphore, SemaphorePermit};

use super::factory::{CaseSettings, LockerFactory, Outage};
use super::CaseResult;
use crate::error::LockError;
use crate::locker::Locker;

/// The most lockers the cases running at the same time in one process
/// hold open together (each locker its own connection or session; a lock
/// taken away from outside counts as one more, since a factory may open
/// a connection for it). ZooKeeper accepts 60 connections per client
/// address by default: this leaves room for sessions still closing after
/// their case ended and for a factory's own connections (fault proxies).
pub const MAX_LOCKERS_AT_ONCE: usize = 40;

/// What [`MAX_LOCKERS_AT_ONCE`] hands out to the cases of this process.
static LOCKER_BUDGET: Semaphore = Semaphore::const_new(MAX_LOCKERS_AT_ONCE);

/// The most lockers case `name` opens (with its factory's
/// [`open`](LockerFactory::open) or
/// [`open_with_outage`](LockerFactory::open_with_outage)) plus the locks it
/// [takes away](LockerFactory::take_away): two unless listed.
/// [`run_all`] fails a case that opens more than this says.
pub fn peak_lockers(name: &str) -> usize {
    match name {
        "election_has_one_leader_at_a_time" => 8,
        "watch_reports_back_to_back_changes" | "observe_reports_back_to_back_leaders" => 6,
        "releasing_a_permit_lets_one_waiter_in" => 5,
        "mutual_exclusion"
        | "semaphore_never_exceeds_its_limit"
        | "readers_share_and_writers_exclude" => 4,
        "release_after_takeover_reports_lost"
        | "lost_signal_fires_when_lock_is_taken_away"
        | "watch_reports_a_lock_taken_away"
        | "purging_a_namespace_spares_others"
        | "dropped_lock_call_leaves_nothing_behind"
        | "stalled_leader_is_replaced_after_ttl"
        | "waiting_writer_is_not_overtaken_by_later_readers" => 3,
        _ => 2,
    }
}

/// Waits until case `name`'s lockers fit in the process's budget; they are
/// given back when the returned permit drops.
async fn admit(name: &str) -> Option<SemaphorePermit<'static>> {
    let wanted = peak_lockers(name).min(MAX_LOCKERS_AT_ONCE);
    // The semaphore is never closed: `None` cannot happen.
    LOCKER_BUDGET
        .acquire_many(u32::try_from(wanted).unwrap_or(u32::MAX))
        .await
        .ok()
}

/// How a case that did not fail ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every check held.
    Passed,
    /// The case needs something the store (or the factory) cannot do;
    /// says, in a user's words, what the store does instead.
    NotApplicable(&'static str),
}

/// Runs one case inside a test and panics unless it ended as the store's
/// test file expects: passed, or, when `expect_not_applicable` (the case
/// is in the file's pinned list), not applicable. A case that passes
/// although pinned, or does not apply although not pinned, fails: a
/// change in what a store (or its factory) can do never goes unnoticed,
/// and a case a store cannot run never reads as a pass.
///
/// The case starts once its [`peak_lockers`] fit in
/// [`MAX_LOCKERS_AT_ONCE`] with those of the other cases running in this
/// process.
pub async fn run_case<F>(name: &str, expect_not_applicable: bool, case: F)
where
    F: Future<Output = CaseResult>,
{
    let _admitted = admit(name).await;
    match (case.await, expect_not_applicable) {
        (Ok(Outcome::Passed), false) => {}
        (Ok(Outcome::NotApplicable(needs)), true) => {
            eprintln!("conformance case `{name}`: not applicable, as pinned: {needs}");
        }
        (Ok(Outcome::Passed), true) => panic!(
            "conformance case `{name}` passed, but this store's test file pins it as not applicable: remove it from the list"
        ),
        (Ok(Outcome::NotApplicable(needs)), false) => panic!(
            "conformance case `{name}` did not run ({needs}); pin it as not applicable only if that is by design"
        ),
        (Err(error), _) => panic!("conformance case `{name}` failed: {error}"),
    }
}

pub(crate) type CaseFuture<'a> = Pin<Box<dyn Future<Output = CaseResult> + Send + 'a>>;

/// One entry of [`CASES`].
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// The case's function name.
    pub name: &'static str,
    /// Runs it.
    pub run: for<'a> fn(&'a dyn LockerFactory) -> CaseFuture<'a>,
}

crate::__conformance_case_names!(__conformance_case_table());

/// How one case ended in [`run_all`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaseStatus {
    /// Every check held.
    Passed,
    /// Needs something the store cannot do; says what it does instead.
    NotApplicable(&'static str),
    /// A check failed, the store returned an error, or the case timed out.
    Failed(String),
}

/// The result of one case in [`run_all`].
#[derive(Clone, Debug)]
pub struct CaseReport {
    /// The case's name.
    pub name: &'static str,
    /// How it ended.
    pub status: CaseStatus,
    /// How long it ran.
    pub elapsed: Duration,
}

/// The longest a single case may run in [`run_all`].
const CASE_LIMIT: Duration = Duration::from_secs(120);

/// Runs every case whose name contains `filter` (all if `None`),
/// concurrently, each in its own task so a failed assertion becomes a
/// [`CaseStatus::Failed`] report instead of a crash. Reports come back in
/// [`CASES`] order.
///
/// Cases start as their [`peak_lockers`] fit in [`MAX_LOCKERS_AT_ONCE`], so
/// the suite never holds more connections or sessions open than that
/// (plus those still closing); a case that opens more lockers than it
/// declares fails. A case's time ([`CaseReport::elapsed`], and the limit
/// on it) counts from its start.
pub async fn run_all(factory: Arc<dyn LockerFactory>, filter: Option<&str>) -> Vec<CaseReport> {
    let selected = CASES
        .iter()
        .filter(|case| filter.is_none_or(|f| case.name.contains(f)));
    let tasks: Vec<_> = selected
        .map(|case| {
            let factory = Arc::clone(&factory);
            let case = *case;
            let task = tokio::spawn(async move {
                let _admitted = admit(case.name).await;
                let counted = Counted::new(factory.as_ref(), case.name);
                let started = Instant::now();
                let outcome = tokio::time::timeout(CASE_LIMIT, (case.run)(&counted)).await;
                (outcome, started.elapsed())
            });
            (case.name, task)
        })
        .collect();
    let mut reports = Vec::with_capacity(tasks.len());
    for (name, task) in tasks {
        let (status, elapsed) = match task.await {
            Ok((Ok(Ok(Outcome::Passed)), elapsed)) => (CaseStatus::Passed, elapsed),
            Ok((Ok(Ok(Outcome::NotApplicable(needs))), elapsed)) => {
                (CaseStatus::NotApplicable(needs), elapsed)
            }
            Ok((Ok(Err(error)), elapsed)) => (CaseStatus::Failed(error.to_string()), elapsed),
            Ok((Err(_), elapsed)) => (
                CaseStatus::Failed(format!("did not finish within {CASE_LIMIT:?}")),
                elapsed,
            ),
            Err(join) => (CaseStatus::Failed(panic_message(join)), Duration::ZERO),
        };
        reports.push(CaseReport {
            name,
            status,
            elapsed,
        });
    }
    reports
}

fn panic_message(error: tokio::task::JoinError) -> String {
    if !error.is_panic() {
        return error.to_string();
    }
    let payload = error.into_panic();
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".to_owned())
}

/// A case's factory that counts what it opens against the case's
/// [`peak_lockers`], and refuses beyond: a case that opens more than it
/// declares could exceed the budget [`run_all`] keeps.
struct Counted<'a> {
    inner: &'a dyn LockerFactory,
    case: &'static str,
    declared: usize,
    opened: AtomicUsize,
}

impl<'a> Counted<'a> {
    fn new(inner: &'a dyn LockerFactory, case: &'static str) -> Self {
        Self {
            inner,
            case,
            declared: peak_lockers(case),
            opened: AtomicUsize::new(0),
        }
    }

    /// Counts one more connection; an error once past the declared peak.
    fn count(&self) -> Result<(), LockError> {
        let opened = self.opened.fetch_add(1, Ordering::SeqCst) + 1;
        if opened > self.declared {
            return Err(LockError::invalid_config(format!(
                "conformance case `{}` opens more than the {} lockers it declares in peak_lockers",
                self.case, self.declared
            )));
        }
        Ok(())
    }
}

#[async_trait]
impl LockerFactory for Counted<'_> {
    async fn open(&self, settings: &CaseSettings) -> Result<Locker, LockError> {
        self.count()?;
        self.inner.open(settings).await
    }

    async fn take_away(&self, locker: &Locker, key: &str) -> Option<Result<(), LockError>> {
        if let Err(error) = self.count() {
            return Some(Err(error));
        }
        self.inner.take_away(locker, key).await
    }

    async fn open_with_outage(
        &self,
        settings: &CaseSettings,
    ) -> Option<Result<(Locker, Box<dyn Outage>), LockError>> {
        if let Err(error) = self.count() {
            return Some(Err(error));
        }
        self.inner.open_with_outage(settings).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::FnFactory;
    use crate::key::Namespace;

    fn memory() -> FnFactory {
        FnFactory::new(|settings: CaseSettings| async move {
            Ok(Locker::memory("runner-tests")?.with_options(settings.locker_options()))
        })
    }

    fn settings() -> CaseSettings {
        CaseSettings {
            namespace: Namespace::new("runner").unwrap(),
            ttl: Duration::from_secs(1),
        }
    }

    #[test]
    fn every_case_fits_in_the_budget() {
        for case in CASES {
            let peak = peak_lockers(case.name);
            assert!(
                (1..=MAX_LOCKERS_AT_ONCE).contains(&peak),
                "{}: {peak}",
                case.name
            );
        }
    }

    #[tokio::test]
    async fn a_case_opening_more_than_it_declares_is_refused() {
        let factory = memory();
        let counted = Counted::new(&factory, "namespaces_isolate");
        assert_eq!(counted.declared, 2);
        counted.open(&settings()).await.unwrap();
        counted.open(&settings()).await.unwrap();
        let Err(error) = counted.open(&settings()).await else {
            panic!("a third locker was opened");
        };
        assert!(error.to_string().contains("namespaces_isolate"), "{error}");
    }

    #[tokio::test]
    async fn the_suite_on_memory_passes_within_its_declarations() {
        let reports = run_all(Arc::new(memory()), None).await;
        let failed: Vec<_> = reports
            .iter()
            .filter(|report| matches!(report.status, CaseStatus::Failed(_)))
            .map(|report| format!("{}: {:?}", report.name, report.status))
            .collect();
        assert!(failed.is_empty(), "{failed:#?}");
    }
}
