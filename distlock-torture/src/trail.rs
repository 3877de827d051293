//! What led to a violation: the register keeps the latest operations and
//! faults of a run, and copies them into an incident when it counts an
//! overlap, an unsafe write or a token regression, so that a row marked
//! unsafe can be explained from its own run.

use std::collections::VecDeque;
use std::fmt;

/// How many recent events an incident shows.
const RECENT: usize = 60;
/// How many incidents a run keeps (the first ones: later ones tend to
/// follow from them).
const INCIDENTS: usize = 5;

/// The recent events of a run and the incidents found so far.
#[derive(Debug)]
pub(crate) struct Trail {
    /// Moments are shown relative to this one (monotonic nanoseconds).
    origin: u64,
    recent: VecDeque<String>,
    incidents: Vec<String>,
}

impl Trail {
    /// An empty trail whose moments count from `origin`.
    pub(crate) fn new(origin: u64) -> Self {
        Self {
            origin,
            recent: VecDeque::with_capacity(RECENT),
            incidents: Vec::new(),
        }
    }

    /// The moment `at`, in milliseconds since the origin.
    pub(crate) fn ms(&self, at: u64) -> Millis {
        Millis(at.saturating_sub(self.origin))
    }

    /// Notes `what` happened at `at`.
    pub(crate) fn record(&mut self, at: u64, what: impl fmt::Display) {
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        let line = format!("{} {what}", self.ms(at));
        self.recent.push_back(line);
    }

    /// Keeps `what` with the events that led to it (the last one is the
    /// operation that showed it).
    pub(crate) fn incident(&mut self, what: impl fmt::Display) {
        if self.incidents.len() == INCIDENTS {
            return;
        }
        let mut text = format!("{what}; the latest events (ms since the run began):");
        for line in &self.recent {
            text.push_str("\n  ");
            text.push_str(line);
        }
        self.incidents.push(text);
    }

    /// The incidents found so far.
    pub(crate) fn incidents(&self) -> Vec<String> {
        self.incidents.clone()
    }
}

/// A moment in milliseconds since the origin, printed with three decimals.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Millis(u64);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1_000_000, self.0 / 1_000 % 1_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_incident_carries_the_latest_events_only() {
        let mut trail = Trail::new(1_000_000);
        for i in 0..(RECENT as u64 + 5) {
            trail.record(1_000_000 + i * 1_500_000, format_args!("event {i}"));
        }
        trail.incident("overlap");
        let [incident] = trail.incidents().try_into().unwrap();
        assert!(incident.starts_with("overlap; the latest events"));
        assert!(!incident.contains("event 4\n"));
        assert!(incident.contains("\n  7.500 event 5\n"));
        assert!(incident.ends_with(&format!("event {}", RECENT + 4)));
    }

    #[test]
    fn only_the_first_incidents_are_kept() {
        let mut trail = Trail::new(0);
        for i in 0..INCIDENTS + 3 {
            trail.incident(i);
        }
        let incidents = trail.incidents();
        assert_eq!(incidents.len(), INCIDENTS);
        assert!(incidents[0].starts_with("0;"));
    }
}
