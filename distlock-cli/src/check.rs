//! `distlock check`: the conformance suite against a live deployment.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use distlock::conformance::{run_all, CaseReport, CaseStatus, LockerFactory, UrlFactory, CASES};

use crate::cli::CheckArgs;
use crate::exit::{one_line, Failure, FAILURE, SUCCESS};
use crate::output;
use crate::url::ChosenStore;

/// Runs every case (or those matching `--filter`), prints one line per case
/// and a `check:` summary; exits 1 if any case failed.
pub(crate) async fn check(store: &ChosenStore, args: CheckArgs) -> Result<i32, Failure> {
    let filter = args.filter.as_deref();
    let selected = CASES
        .iter()
        .filter(|case| filter.is_none_or(|f| case.name.contains(f)))
        .count();
    if selected == 0 {
        return Err(Failure::usage(format!(
            "no conformance case name contains {:?}",
            filter.unwrap_or_default()
        )));
    }
    // Connect once up front so a bad URL or a dead store gives its own exit
    // code and one message, instead of twenty failed cases.
    let locker = store.connect().await?;
    if !locker.capabilities().namespaced_keys {
        // The cases keep apart from live locks (and from each other) by
        // namespaces of their own; here they would take the very names
        // other clients use.
        return Err(Failure::usage(format!(
            "the check runs in namespaces of its own, but the {} backend lays keys out as \
             another client family does (option `layout`), where the namespace is not part \
             of a key: run the check on the same store without `layout`",
            locker.backend_name()
        )));
    }
    let factory = UrlFactory::new(store.as_str()).map_err(|error| store.failure(error))?;
    output::line(&format!(
        "checking {} ({} backend): {selected} case{}",
        store.shown(),
        locker.backend_name(),
        if selected == 1 { "" } else { "s" }
    ))?;
    drop(locker);

    let factory = Arc::new(factory);
    let reports = {
        let _quiet = QuietPanics::install();
        run_all(Arc::clone(&factory) as Arc<dyn LockerFactory>, filter).await
    };
    // The cases' namespaces were made for this run: leave nothing behind.
    if let Err(error) = factory.purge_namespaces().await {
        output::say(&format!(
            "warning: could not remove what the check left in the store: {}",
            store.failure(error)
        ));
    }

    let mut counts = [0usize; 3];
    for report in &reports {
        let (line, slot) = describe(report);
        counts[slot] += 1;
        output::line(&store.scrub(&line))?;
    }
    let [passed, failed, not_applicable] = counts;
    output::line(&format!(
        "check: {passed} passed, {failed} failed, {not_applicable} not applicable"
    ))?;
    Ok(if failed > 0 { FAILURE } else { SUCCESS })
}

/// The report line of one case, and its summary slot (passed, failed, n/a).
fn describe(report: &CaseReport) -> (String, usize) {
    match &report.status {
        CaseStatus::Passed => (
            format!(
                "ok    {} ({:.2}s)",
                report.name,
                report.elapsed.as_secs_f64()
            ),
            0,
        ),
        CaseStatus::Failed(message) => (format!("FAIL  {}: {}", report.name, one_line(message)), 1),
        CaseStatus::NotApplicable(needs) => (format!("n/a   {}: {needs}", report.name), 2),
    }
}

/// Silences panic messages while the suite runs: a failing case panics
/// (that is how assertions fail), and its message already appears in the
/// `FAIL` line, so the hook's own line would only clutter the report.
struct QuietPanics;

impl QuietPanics {
    fn install() -> Self {
        output::QUIET_PANICS.store(true, Ordering::SeqCst);
        Self
    }
}

impl Drop for QuietPanics {
    fn drop(&mut self) {
        output::QUIET_PANICS.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn report(status: CaseStatus) -> CaseReport {
        CaseReport {
            name: "mutual_exclusion",
            status,
            elapsed: Duration::from_millis(1234),
        }
    }

    #[test]
    fn case_lines_read_as_documented() {
        assert_eq!(
            describe(&report(CaseStatus::Passed)).0,
            "ok    mutual_exclusion (1.23s)"
        );
        assert_eq!(
            describe(&report(CaseStatus::Failed("left: 1\nright: 2".into()))).0,
            "FAIL  mutual_exclusion: left: 1 | right: 2"
        );
        assert_eq!(
            describe(&report(CaseStatus::NotApplicable("no way to do it"))).0,
            "n/a   mutual_exclusion: no way to do it"
        );
    }
}
