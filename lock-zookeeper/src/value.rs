//! What a contender node stores: its owner id and the holder's value, in
//! lock-core's shared layout ([`lock_core::backend::holder_data`]).
//!
//! A contender's data changes only while it holds the lock: the holder
//! replaces its value, or marks its node as it releases it (see
//! [`crate::ahead`]). The release's mark (empty data) is written in one
//! transaction with the node's deletion, so no read ever returns it.

use std::borrow::Cow;

use lock_core::backend::{holder_data, holder_from_data};
use lock_core::{FencingToken, LockInfo};

/// The data of a contender node of `owner` holding `value` (empty: none).
pub(crate) fn node_data<'a>(owner: &'a str, value: &str) -> Cow<'a, [u8]> {
    holder_data(owner, value)
}

/// The holder a contender node describes: its data and its czxid (the
/// fencing token). No per-lock lease: the lock lasts as long as its
/// holder's session.
pub(crate) fn lock_info(data: &[u8], czxid: i64) -> LockInfo {
    holder_from_data(data, FencingToken::new(czxid.unsigned_abs()), None)
}
