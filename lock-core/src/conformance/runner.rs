//! Running cases: one at a time inside `cargo test`, or all of them against
//! a live deployment.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::factory::LockerFactory;
use super::CaseResult;

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
pub async fn run_case<F>(name: &str, expect_not_applicable: bool, case: F)
where
    F: Future<Output = CaseResult>,
{
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
pub async fn run_all(factory: Arc<dyn LockerFactory>, filter: Option<&str>) -> Vec<CaseReport> {
    let selected = CASES
        .iter()
        .filter(|case| filter.is_none_or(|f| case.name.contains(f)));
    let tasks: Vec<_> = selected
        .map(|case| {
            let factory = Arc::clone(&factory);
            let case = *case;
            let task = tokio::spawn(async move {
                let started = Instant::now();
                let outcome = tokio::time::timeout(CASE_LIMIT, (case.run)(factory.as_ref())).await;
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
