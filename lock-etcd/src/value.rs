//! What a queue entry's value holds: the owner id and the holder's value,
//! in lock-core's shared layout ([`lock_core::backend::holder_data`]).

use lock_core::backend::{holder_data, holder_from_data};
use lock_core::{FencingToken, LockInfo};

/// The bytes stored in an entry for `owner` with `value`.
pub(crate) fn encode(owner: &str, value: &str) -> Vec<u8> {
    holder_data(owner, value).into_owned()
}

/// The holder an entry with create revision `token` and value `bytes`
/// describes (the time left on its lease unknown).
pub(crate) fn holder_info(token: i64, bytes: &[u8]) -> LockInfo {
    let token = FencingToken::new(u64::try_from(token).unwrap_or(0));
    holder_from_data(bytes, token, None)
}

/// [`holder_info`] in the shape of [`crate::observe::Describe`]: in
/// distlock's layout the key says nothing about the holder.
pub(crate) fn entry_holder(_key: &[u8], token: i64, bytes: &[u8]) -> LockInfo {
    holder_info(token, bytes)
}
