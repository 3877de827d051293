//! The fencing register the holders use: every access checked against
//! the tokens seen, and logged in order (see the [module docs](super)).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::child::HoldMode;
use crate::fencing::{FencedResource, StaleToken};

/// What a holder does with the resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Access {
    /// A read, as a read lock's holder makes.
    Read,
    /// A write, as a write lock's holder makes.
    Write,
}

impl Access {
    /// What a holder in `mode` does: reads with a read lock, writes
    /// otherwise.
    pub fn of(mode: HoldMode) -> Self {
        match mode {
            HoldMode::Read => Self::Read,
            HoldMode::Lock | HoldMode::Write => Self::Write,
        }
    }
}

/// One access presented to an [`RwRegister`], as it logged it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    /// Its place in the register's log (0 first).
    pub seq: usize,
    /// Who made it, as named by the caller.
    pub who: String,
    /// A read or a write.
    pub access: Access,
    /// The fencing token it came with.
    pub token: u64,
    /// `None` if accepted; else the higher token that refused it.
    pub refused: Option<StaleToken>,
}

impl Op {
    /// `Ok` if accepted, else the token that refused it.
    pub fn outcome(&self) -> Result<(), StaleToken> {
        self.refused.map_or(Ok(()), Err)
    }
}

/// The accepted accesses of one token: from the first to the last, by
/// place in the register's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// Read or write.
    pub access: Access,
    /// The token.
    pub token: u64,
    /// Who made them.
    pub who: String,
    /// The place of the first.
    pub first: usize,
    /// The place of the last.
    pub last: usize,
}

/// A resource read and written under a read-write lock, checking every
/// access's fencing token (see the [module docs](super)). Clones share one
/// state.
#[derive(Clone, Debug, Default)]
pub struct RwRegister {
    writes: FencedResource,
    log: Arc<Mutex<Log>>,
}

#[derive(Debug, Default)]
struct Log {
    /// The highest token of an accepted read.
    highest_read: Option<u64>,
    ops: Vec<Op>,
}

impl RwRegister {
    /// An empty register.
    pub fn new() -> Self {
        Self::default()
    }

    /// A write by `who` with `token`: refused when a read with a higher
    /// token was accepted (the read fence), or by the writes'
    /// [`FencedResource`] (a higher write).
    pub fn write(&self, who: &str, token: u64) -> Result<(), StaleToken> {
        self.present(who, Access::Write, token).outcome()
    }

    /// A read by `who` with `token`, checking that no writer with a
    /// higher token has written: flagged (`Err`) if one has.
    pub fn read(&self, who: &str, token: u64) -> Result<(), StaleToken> {
        self.present(who, Access::Read, token).outcome()
    }

    /// An access of either kind, as the register logged it.
    pub fn present(&self, who: &str, access: Access, token: u64) -> Op {
        let mut log = self.log();
        let result = match access {
            Access::Write => match log.highest_read.filter(|&read| token < read) {
                Some(highest) => Err(StaleToken {
                    presented: token,
                    highest,
                }),
                None => self.writes.write(token, who),
            },
            Access::Read => match self.writes.highest().filter(|&write| write > token) {
                Some(highest) => Err(StaleToken {
                    presented: token,
                    highest,
                }),
                None => {
                    log.highest_read = log.highest_read.max(Some(token));
                    Ok(())
                }
            },
        };
        let op = Op {
            seq: log.ops.len(),
            who: who.to_owned(),
            access,
            token,
            refused: result.err(),
        };
        log.ops.push(op.clone());
        op
    }

    /// The writes' fencing resource: the highest token written, the last
    /// write, how many were accepted and rejected by it.
    pub fn writes(&self) -> &FencedResource {
        &self.writes
    }

    /// Every access so far, in order.
    pub fn ops(&self) -> Vec<Op> {
        self.log().ops.clone()
    }

    /// The place the next access will take in the log.
    pub fn next_seq(&self) -> usize {
        self.log().ops.len()
    }

    /// The accesses refused or flagged so far.
    pub fn refused(&self) -> Vec<Op> {
        let log = self.log();
        log.ops
            .iter()
            .filter(|op| op.refused.is_some())
            .cloned()
            .collect()
    }

    /// The span of each token's accepted accesses, by token.
    pub fn spans(&self) -> Vec<Span> {
        let mut spans: BTreeMap<(u64, Access), Span> = BTreeMap::new();
        for op in self.log().ops.iter().filter(|op| op.refused.is_none()) {
            spans
                .entry((op.token, op.access))
                .and_modify(|span| span.last = op.seq)
                .or_insert_with(|| Span {
                    access: op.access,
                    token: op.token,
                    who: op.who.clone(),
                    first: op.seq,
                    last: op.seq,
                });
        }
        spans.into_values().collect()
    }

    /// `Ok` when the accepted accesses show no reader beside a writer and
    /// no two writers at once: every writer's span and every other span
    /// are apart, the lower token's first. `Err` names the pair.
    pub fn exclusive(&self) -> Result<(), String> {
        let spans = self.spans();
        for (i, a) in spans.iter().enumerate() {
            for b in &spans[i + 1..] {
                let apart = a.token == b.token
                    || (a.access == Access::Read && b.access == Access::Read)
                    || (a.token < b.token && a.last < b.first)
                    || (b.token < a.token && b.last < a.first);
                if !apart {
                    return Err(format!(
                        "{} ({:?}, token {}, accesses {}..={}) and {} ({:?}, token {}, \
                         accesses {}..={}) held at once",
                        a.who,
                        a.access,
                        a.token,
                        a.first,
                        a.last,
                        b.who,
                        b.access,
                        b.token,
                        b.first,
                        b.last
                    ));
                }
            }
        }
        Ok(())
    }

    fn log(&self) -> MutexGuard<'_, Log> {
        // Updated in one step under the lock: valid even if poisoned.
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_below_a_read_is_refused_and_a_read_below_a_write_flagged() {
        let register = RwRegister::new();
        register.write("w1", 3).unwrap();
        // Readers share, whatever their order.
        register.read("r1", 5).unwrap();
        register.read("r2", 4).unwrap();
        register.read("r1", 5).unwrap();
        // The writer that held before the readers: refused by the read fence.
        let refused = register.write("w1", 3).unwrap_err();
        assert_eq!((refused.presented, refused.highest), (3, 5));
        assert_eq!(register.writes().rejected(), 0, "refused before the writes");
        // The next writer is in; the readers before it are flagged.
        register.write("w3", 7).unwrap();
        let flagged = register.read("r2", 4).unwrap_err();
        assert_eq!((flagged.presented, flagged.highest), (4, 7));
        // A writer above the readers but below a higher write: refused by
        // the fenced resource.
        assert!(register.write("w2", 6).is_err());
        assert_eq!(register.writes().rejected(), 1);
        assert_eq!(register.writes().last_write(), Some((7, "w3".to_owned())));

        let refused: Vec<_> = register.refused().iter().map(|op| op.seq).collect();
        assert_eq!(refused, [4, 6, 7]);
        let spans: Vec<_> = register
            .spans()
            .into_iter()
            .map(|s| (s.token, s.access, s.first, s.last))
            .collect();
        assert_eq!(
            spans,
            [
                (3, Access::Write, 0, 0),
                (4, Access::Read, 2, 2),
                (5, Access::Read, 1, 3),
                (7, Access::Write, 5, 5)
            ]
        );
        register.exclusive().unwrap();
    }

    #[test]
    fn accepted_accesses_never_overlap_a_write() {
        // Whatever the order of presentation, what is accepted keeps every
        // writer's span apart from the others, in token order.
        for seed in 0..200_u64 {
            let register = RwRegister::new();
            let mut rng = fastrand::Rng::with_seed(seed);
            for _ in 0..40 {
                let token = rng.u64(1..8);
                let access = if token.is_multiple_of(3) {
                    Access::Write
                } else {
                    Access::Read
                };
                let _ = register.present(&format!("h{token}"), access, token);
            }
            register
                .exclusive()
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        }
    }
}
