//! What a lock key holds, and what its holder channel says.
//!
//! A lock's value is `"<token> <owner>"`, followed by `"\n<value>"` when
//! the holder stores a non-empty value: a lock without a value is stored
//! exactly as before values existed. Owner ids contain no newline, so the
//! owner ends at the first newline and the value is everything after it
//! (spaces, newlines and any UTF-8 included).
//!
//! On Redlock the part after the newline is `"<seq> <value>"`: each
//! master is written on its own, so a value replaced on some masters only
//! (a [`set_value`](lock_core::backend::HeldLock::set_value) whose outcome
//! is unknown) must not hide a later one; the holder numbers its values and
//! a read takes the highest number among the masters that agree on the
//! holder.
//!
//! While a lock is watched, every change is published on its holder
//! channel (see [`watch`](crate::watch)): `"held <pttl> <lock value>"` for
//! a new holder or value, `"free"` when the lock is released, and
//! `"sync <nonce>"` after a watcher's read.

use std::time::Duration;

use lock_core::{FencingToken, LockInfo};

/// A lock value written by distlock, split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stored<'a> {
    /// The holder's fencing token.
    pub(crate) token: FencingToken,
    /// The holder's owner id.
    pub(crate) owner: &'a str,
    /// What follows the owner (the value; on Redlock `"<seq> <value>"`);
    /// empty when there is none.
    pub(crate) rest: &'a str,
}

/// Splits a lock value; `None` for a value distlock did not write.
pub(crate) fn parse_lock_value(value: &str) -> Option<Stored<'_>> {
    let (token, holder) = value.split_once(' ')?;
    let (owner, rest) = holder.split_once('\n').unwrap_or((holder, ""));
    Some(Stored {
        token: FencingToken::new(token.parse().ok()?),
        owner,
        rest,
    })
}

/// The holder a lock value of one instance or cluster describes, with
/// `ttl_left` on its lease. A value distlock did not write is shown as the
/// owner, with token 0.
pub(crate) fn lock_info(value: &str, ttl_left: Option<Duration>) -> LockInfo {
    match parse_lock_value(value) {
        Some(stored) => LockInfo::new(stored.owner, stored.token, ttl_left).with_value(stored.rest),
        None => LockInfo::new(value, FencingToken::new(0), ttl_left),
    }
}

/// A PTTL reply as a remaining lease: `None` for a key without expiry (or
/// gone).
pub(crate) fn pttl(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// The Redlock value part for a holder's `seq`-th value.
pub(crate) fn redlock_rest(seq: u64, value: &str) -> String {
    format!("{seq} {value}")
}

/// Splits a Redlock value part into its number and the value; an empty
/// part (a lock taken without a value) is number 0 with no value.
pub(crate) fn parse_redlock_rest(rest: &str) -> (u64, &str) {
    match rest.split_once(' ') {
        Some((seq, value)) => (seq.parse().unwrap_or(0), value),
        None => (0, ""),
    }
}

/// A message of a lock's holder channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HolderMessage<'a> {
    /// The lock is held as described (a new holder or a new value).
    Held(LockInfo),
    /// The lock was released.
    Free,
    /// A watcher read the lock just before this message.
    Sync(&'a str),
}

/// Reads a holder channel message; `None` for anything else.
pub(crate) fn parse_holder_message(payload: &[u8]) -> Option<HolderMessage<'_>> {
    let text = std::str::from_utf8(payload).ok()?;
    if text == "free" {
        return Some(HolderMessage::Free);
    }
    if let Some(nonce) = text.strip_prefix("sync ") {
        return Some(HolderMessage::Sync(nonce));
    }
    let (ms, value) = text.strip_prefix("held ")?.split_once(' ')?;
    let ttl_left = pttl(ms.parse().ok()?);
    parse_lock_value(value)?;
    Some(HolderMessage::Held(lock_info(value, ttl_left)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_without_a_value_is_token_and_owner() {
        let stored = parse_lock_value("42 host/12/abc").unwrap();
        assert_eq!(stored.token, FencingToken::new(42));
        assert_eq!((stored.owner, stored.rest), ("host/12/abc", ""));
        assert_eq!(parse_lock_value("no-token"), None);
        assert_eq!(parse_lock_value("x owner"), None);
    }

    #[test]
    fn the_value_follows_the_first_newline_whatever_it_holds() {
        for value in [
            "a b",
            "line 1\nline 2\n",
            "\n",
            " ",
            "Grüße, 世界 🦀",
            &"v".repeat(4096),
        ] {
            let stored = format!("7 host/1/ff\n{value}");
            let info = lock_info(&stored, None);
            assert_eq!(info.owner, "host/1/ff");
            assert_eq!(info.token, FencingToken::new(7));
            assert_eq!(info.value, value);
        }
    }

    #[test]
    fn a_foreign_value_is_shown_as_it_is() {
        let info = lock_info("someone else's", Some(Duration::from_secs(1)));
        assert_eq!(info.owner, "someone else's");
        assert_eq!(info.token, FencingToken::new(0));
        assert_eq!(info.ttl_left, Some(Duration::from_secs(1)));
    }

    #[test]
    fn redlock_values_are_numbered() {
        assert_eq!(
            parse_redlock_rest(&redlock_rest(3, "a b\nc")),
            (3, "a b\nc")
        );
        assert_eq!(parse_redlock_rest(&redlock_rest(4, "")), (4, ""));
        assert_eq!(parse_redlock_rest(""), (0, ""));
    }

    #[test]
    fn holder_messages() {
        assert_eq!(parse_holder_message(b"free"), Some(HolderMessage::Free));
        assert_eq!(
            parse_holder_message(b"sync ab/1"),
            Some(HolderMessage::Sync("ab/1"))
        );
        let held = parse_holder_message(b"held 900 5 me\nv 1").unwrap();
        let expected = LockInfo::new("me", FencingToken::new(5), Some(Duration::from_millis(900)))
            .with_value("v 1");
        assert_eq!(held, HolderMessage::Held(expected));
        let forever = parse_holder_message(b"held -1 5 me").unwrap();
        assert_eq!(
            forever,
            HolderMessage::Held(LockInfo::new("me", FencingToken::new(5), None))
        );
        assert_eq!(parse_holder_message(b"held x 5 me"), None);
        assert_eq!(parse_holder_message(b"held 1 not-distlock"), None);
        assert_eq!(parse_holder_message(b"released"), None);
    }
}
