//! What a client tells the register ([`Op`]) and what it answers
//! ([`Verdict`]).

use serde::{Deserialize, Serialize};

use crate::trail::Trail;

/// Who sent an operation: one client task or process of a run.
pub type ClientId = u32;

/// What a client tells the register.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// About to wait for `key`.
    Waiting {
        /// The lock's key.
        key: String,
    },
    /// The wait for `key` ended without the lock (timeout or error).
    GaveUp {
        /// The lock's key.
        key: String,
    },
    /// Holds `key` with `token`; its guard said "held" after `claim`.
    Begin {
        /// The lock's key.
        key: String,
        /// The guard's fencing token.
        token: u64,
        /// Monotonic nanoseconds read just before the guard was asked.
        claim: u64,
    },
    /// A write with `token`; the guard said "held" after `claim`.
    Write {
        /// The lock's key.
        key: String,
        /// The guard's fencing token.
        token: u64,
        /// Monotonic nanoseconds read just before the guard was asked.
        claim: u64,
    },
    /// Holds a read lock of the read-write lock `key` with `token` (shared
    /// with other readers); its guard said "held" after `claim`.
    BeginRead {
        /// The read-write lock's key.
        key: String,
        /// The guard's fencing token.
        token: u64,
        /// Monotonic nanoseconds read just before the guard was asked.
        claim: u64,
    },
    /// A fenced read of the value under `key`: "I hold a read lock with
    /// `token`"; the guard said "held" after `claim`.
    Read {
        /// The read-write lock's key.
        key: String,
        /// The guard's fencing token.
        token: u64,
        /// Monotonic nanoseconds read just before the guard was asked.
        claim: u64,
    },
    /// Done with `key`: sent before the release.
    End {
        /// The lock's key.
        key: String,
    },
    /// The guard reported the lock on `key` lost.
    Lost {
        /// The lock's key.
        key: String,
    },
}

/// The register's answer to an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Taken in (or just noted, for operations without a token).
    Accepted,
    /// Refused by the fencing check: a higher token was already seen.
    Stale,
}

/// `op` from `client`, in a line of the trail.
pub(super) fn describe(client: ClientId, op: &Op, trail: &Trail) -> String {
    match op {
        Op::Waiting { key } => format!("client {client}: waits for `{key}`"),
        Op::GaveUp { key } => format!("client {client}: gave up `{key}`"),
        Op::Begin { key, token, claim } => format!(
            "client {client}: begins `{key}` with token {token} (held at {})",
            trail.ms(*claim)
        ),
        Op::Write { key, token, claim } => format!(
            "client {client}: writes `{key}` with token {token} (held at {})",
            trail.ms(*claim)
        ),
        Op::BeginRead { key, token, claim } => format!(
            "client {client}: begins reading `{key}` with token {token} (held at {})",
            trail.ms(*claim)
        ),
        Op::Read { key, token, claim } => format!(
            "client {client}: reads `{key}` with token {token} (held at {})",
            trail.ms(*claim)
        ),
        Op::End { key } => format!("client {client}: ends `{key}`"),
        Op::Lost { key } => format!("client {client}: told `{key}` is lost"),
    }
}
