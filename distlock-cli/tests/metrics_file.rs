//! `--metrics-file PATH`: the lock metrics of one run, written when it
//! ends in Prometheus's text format, replacing what the last run wrote.

mod common;

use common::{output, stderr, Store};

/// The value of the sample of `metric` whose labels include every one of
/// `labels`, in Prometheus text `text`.
fn sample(text: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|line| line.starts_with(&format!("{metric}{{")))
        .filter(|line| labels.iter().all(|label| line.contains(label)))
        .find_map(|line| line.rsplit_once(' ')?.1.parse().ok())
}

#[test]
fn a_run_writes_its_lock_metrics_when_it_ends() {
    let store = Store::new();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("distlock.prom");
    let path_arg = path.to_str().unwrap();
    for _ in 0..2 {
        let out = output(store.distlock(&[
            "run",
            "jobs/nightly",
            "--metrics-file",
            path_arg,
            "--",
            "true",
        ]));
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let text = std::fs::read_to_string(&path).expect("the metrics file");
    let lock = ["store=\"file\"", "kind=\"lock\""];
    // Each run writes its own figures: one lock taken and released.
    assert_eq!(
        sample(&text, "distlock_acquisitions_total", &lock),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "distlock_releases_total", &lock),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "distlock_locks_held", &lock),
        Some(0.0),
        "{text}"
    );
    assert!(
        text.contains("# TYPE distlock_acquire_wait_seconds"),
        "{text}"
    );
    assert!(
        !text.contains("jobs/nightly"),
        "a key became a label: {text}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "temporary files left: {leftovers:?}");
}

#[test]
fn a_metrics_file_that_cannot_be_written_at_the_end_is_reported_without_changing_the_exit_code() {
    let store = Store::new();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("distlock.prom");
    // The directory is there when distlock checks it, gone when the run
    // ends.
    let script = format!("rm -r '{}'; exit 3", dir.path().display());
    let out = output(store.distlock(&[
        "run",
        "jobs/other",
        "--metrics-file",
        path.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(
        err.trim(),
        format!(
            "distlock: cannot write the metrics to {}: no such file or directory",
            path.display()
        )
    );
}
