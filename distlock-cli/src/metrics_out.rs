//! Lock metrics out of a short-lived process: `--metrics-file PATH` writes
//! them, in Prometheus's text format, when the command ends; `bench
//! --json` carries them in its report.
//!
//! A `distlock run` lives as long as its command, often a cron job's few
//! seconds: nothing can scrape it, and a push gateway is one more server
//! to run. node_exporter's textfile collector reads `*.prom` files from a
//! directory, which is what this writes (atomically: a temporary file in
//! the same directory, renamed over PATH), so the last run's figures stay
//! visible until the next run replaces them.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The recorder's handle, once installed.
static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs a Prometheus recorder for the whole process (once).
pub(crate) fn install() {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        // Only this function installs one, and only once.
        let _ = metrics::set_global_recorder(recorder);
        handle
    });
}

/// The directory `path` will be written in.
fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Checks, before anything runs, that `path` can be written when the
/// command ends: its directory exists and takes a new file (the temporary
/// file the write renames over `path`). Returns the problem, naming the
/// directory, if not.
pub(crate) fn check_writable(path: &Path) -> Result<(), String> {
    let dir = directory_of(path);
    match tempfile::NamedTempFile::new_in(dir) {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "--metrics-file {}: the directory {} does not exist",
            path.display(),
            dir.display()
        )),
        Err(error) => Err(format!(
            "--metrics-file {}: cannot create files in {}: {}",
            path.display(),
            dir.display(),
            plain_io_error(&error)
        )),
    }
}

/// Writes what was recorded to `path`, replacing it at once. An error
/// names no temporary file, only what failed.
pub(crate) fn write_file(path: &Path) -> Result<(), String> {
    let Some(handle) = HANDLE.get() else {
        return Ok(());
    };
    let write = || -> std::io::Result<()> {
        let mut file = tempfile::NamedTempFile::new_in(directory_of(path))?;
        file.write_all(handle.render().as_bytes())?;
        file.as_file().sync_all()?;
        file.persist(path).map_err(|e| e.error)?;
        Ok(())
    };
    write().map_err(|error| plain_io_error(&error))
}

/// An I/O error's own words (`no such file or directory`), without the
/// `(os error 2)` and the temporary file's path some wrappers add.
fn plain_io_error(error: &std::io::Error) -> String {
    lock_core::backend::diagnose::io_words(error)
}

/// What was recorded, as series (the metric name and its labels, as
/// Prometheus writes them) to values; `None` without a recorder.
pub(crate) fn series() -> Option<BTreeMap<String, f64>> {
    HANDLE.get().map(|handle| parse_series(&handle.render()))
}

/// Reads the samples of Prometheus's text format; comments and lines that
/// are not `series value` are skipped.
fn parse_series(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.trim().to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_read_and_comments_skipped() {
        let text = "# TYPE distlock_acquisitions_total counter\n\
                    distlock_acquisitions_total{store=\"mem\",namespace=\"a b\",kind=\"lock\"} 3\n\
                    distlock_hold_seconds{store=\"mem\",quantile=\"0.5\"} 0.25\n\
                    \n";
        let series = parse_series(text);
        assert_eq!(series.len(), 2);
        assert_eq!(
            series["distlock_acquisitions_total{store=\"mem\",namespace=\"a b\",kind=\"lock\"}"],
            3.0
        );
        assert_eq!(
            series["distlock_hold_seconds{store=\"mem\",quantile=\"0.5\"}"],
            0.25
        );
    }
}
