//! Reading durations on the command line: bare numbers are seconds
//! (as `flock -w` and `timeout` take them), else humantime (`500ms`).

use std::time::Duration;

/// How long `run` and `elect` wait for the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// At most this long; zero is one attempt.
    For(Duration),
    /// Until the lock is free.
    Forever,
}

const DURATION_EXAMPLES: &str = "examples: 5 (seconds), 500ms, 10s, 2m";

/// A duration: a number of seconds (`5`, `0.5`, as `flock -w` and
/// `timeout` take them) or a humantime duration (`500ms`, `2m`).
pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    if text.starts_with('-') {
        return Err(format!("`{text}` is negative; a duration is 0 or more"));
    }
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds)
            .map_err(|_| format!("`{text}` is not a duration ({DURATION_EXAMPLES})"));
    }
    humantime::parse_duration(text)
        .map_err(|_| format!("`{text}` is not a duration ({DURATION_EXAMPLES})"))
}

pub(super) fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        d if d.is_zero() => Err("must be greater than zero".to_owned()),
        d => Ok(d),
    }
}

pub(super) fn parse_wait(text: &str) -> Result<Wait, String> {
    if text == "forever" {
        return Ok(Wait::Forever);
    }
    parse_duration(text)
        .map(Wait::For)
        .map_err(|reason| format!("{reason}, or `forever`"))
}
