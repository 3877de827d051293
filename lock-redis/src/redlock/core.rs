//! [`RedlockCore`]: what every part of a Redlock backend shares — one
//! connection per master and the quorum, the pub/sub listener, the
//! renewal queue — and the calls on every master that several of them
//! make (a majority's answers, the holder a majority agrees on).
//!
//! The backend, its holds, rounds and watches each keep an `Arc` of it;
//! this module uses none of them.

use std::time::Duration;

use futures_util::future::join_all;
use lock_core::{FencingToken, LockError, LockInfo, LockName};

use crate::config::RedisConfig;
use crate::conn::{Conn, ScriptCall};
use crate::counter::Counters;
use crate::deadline::Timeouts;
use crate::keys::LockKeys;
use crate::pubsub::Listener;
use crate::renewal::Renewer;
use crate::scripts::{parse_inspect, scripts};
use crate::value::{parse_lock_value, parse_redlock_rest};

/// The shared state of one Redlock backend.
pub(super) struct RedlockCore {
    /// One connection per master, in URL order.
    pub(super) nodes: Vec<Conn>,
    /// The bound of each command.
    pub(super) timeouts: Timeouts,
    /// How many masters make a majority.
    pub(super) quorum: usize,
    /// Releases and holder changes heard on every master.
    pub(super) listener: Listener,
    /// The batched renewals of every hold.
    pub(super) renewer: Renewer,
    /// The settings the backend was opened with.
    pub(super) config: RedisConfig,
}

impl RedlockCore {
    /// Runs `call` on the masters at `nodes` (indices into
    /// [`nodes`](Self::nodes)), all at once; their outcomes in that order.
    pub(super) async fn eval_on<T: redis::FromRedisValue>(
        &self,
        nodes: impl Iterator<Item = usize>,
        call: &ScriptCall<'_>,
    ) -> Vec<Result<T, LockError>> {
        join_all(nodes.map(|i| self.nodes[i].eval(self.timeouts, call))).await
    }

    /// Runs `call` on every master; fails unless a majority answered.
    pub(super) async fn on_all<T: redis::FromRedisValue>(
        &self,
        call: &ScriptCall<'_>,
    ) -> Result<Vec<T>, LockError> {
        let answers: Vec<T> = self
            .eval_on(0..self.nodes.len(), call)
            .await
            .into_iter()
            .filter_map(Result::ok)
            .collect();
        if answers.len() < self.quorum {
            return Err(LockError::Unavailable {
                message: format!(
                    "Redlock {}: only {} of {} masters answered",
                    call.what(),
                    answers.len(),
                    self.nodes.len()
                ),
                source: None,
            });
        }
        Ok(answers)
    }

    /// The Redis names of the lock `name`: the same on every master, with
    /// one counter per namespace.
    pub(super) fn keys(&self, name: &LockName) -> LockKeys {
        LockKeys::new(name, Counters::PerNamespace)
    }

    /// The holder of `name` a majority of masters agree on, read from
    /// every master; fails unless a majority answered.
    pub(super) async fn holder(&self, name: &LockName) -> Result<Option<LockInfo>, LockError> {
        let keys = self.keys(name);
        let replies: Vec<redis::Value> = self
            .on_all(&ScriptCall::new(
                "inspect",
                &scripts().inspect,
                &[keys.lock()],
                &[],
            ))
            .await?;
        let values: Vec<(String, Option<Duration>)> =
            replies.into_iter().filter_map(parse_inspect).collect();
        Ok(majority_holder(&values, self.quorum))
    }
}

/// The holder a majority of masters agree on, from each master's lock
/// value and PTTL: the largest token among them (the raise stamps it on
/// all), the shortest lease, and the value with the highest number.
fn majority_holder(values: &[(String, Option<Duration>)], quorum: usize) -> Option<LockInfo> {
    let stored: Vec<_> = values
        .iter()
        .filter_map(|(value, ttl)| Some((parse_lock_value(value)?, *ttl)))
        .collect();
    for (candidate, _) in &stored {
        let same: Vec<_> = stored
            .iter()
            .filter(|(s, _)| s.owner == candidate.owner)
            .collect();
        if same.len() < quorum {
            continue;
        }
        let token = same.iter().map(|(s, _)| s.token).max();
        let ttl_left = same.iter().filter_map(|(_, ttl)| *ttl).min();
        let value = same
            .iter()
            .map(|(s, _)| parse_redlock_rest(s.rest))
            .max_by_key(|(seq, _)| *seq)
            .map_or("", |(_, value)| value);
        let token = token.unwrap_or(FencingToken::new(0));
        return Some(LockInfo::new(candidate.owner, token, ttl_left).with_value(value));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn master(value: &str, ttl_ms: u64) -> (String, Option<Duration>) {
        (value.to_owned(), Some(Duration::from_millis(ttl_ms)))
    }

    #[test]
    fn the_holder_is_the_owner_a_majority_agrees_on() {
        let values = [
            master("7 a\n2 newest", 900),
            master("5 a\n1 older", 800),
            master("7 a", 950),
            master("9 b\n0 other", 990),
        ];
        let holder = majority_holder(&values, 3).unwrap();
        assert_eq!(holder.owner, "a");
        assert_eq!(holder.token, FencingToken::new(7), "the stamped token");
        assert_eq!(holder.ttl_left, Some(Duration::from_millis(800)));
        assert_eq!(holder.value, "newest", "the highest-numbered value");
        assert_eq!(majority_holder(&values[1..], 3), None, "no majority");
    }

    #[test]
    fn a_value_replaced_on_a_minority_is_seen_only_if_newer() {
        let values = [
            master("7 a\n1 set", 900),
            master("7 a\n1 set", 900),
            master("7 a", 900),
        ];
        assert_eq!(majority_holder(&values, 2).unwrap().value, "set");
        let unset = [master("7 a\n3 ", 900), master("7 a\n2 x", 900)];
        assert_eq!(majority_holder(&unset, 2).unwrap().value, "");
    }
}
