//! One byte layout for "owner id and holder value", for stores that keep
//! both in one blob (an etcd entry's value, a ZooKeeper node's data).
//!
//! Without a value the data is the owner id alone, byte for byte what it
//! was before values existed; with one it is `<owner>\n<value>`. Owner ids
//! (`hostname/pid/uuid`) never contain a newline, so the first newline ends
//! the owner and the value may hold any text.

use std::borrow::Cow;
use std::time::Duration;

use crate::info::LockInfo;
use crate::token::FencingToken;

/// Separates the owner id from the value.
const SEPARATOR: u8 = b'\n';

/// The data for `owner` holding `value` (empty: none); borrowed, with no
/// copy, when there is no value.
pub fn holder_data<'a>(owner: &'a str, value: &str) -> Cow<'a, [u8]> {
    if value.is_empty() {
        return Cow::Borrowed(owner.as_bytes());
    }
    let mut data = Vec::with_capacity(owner.len() + 1 + value.len());
    data.extend_from_slice(owner.as_bytes());
    data.push(SEPARATOR);
    data.extend_from_slice(value.as_bytes());
    Cow::Owned(data)
}

/// The holder `data` describes, with its `token` and the time left on its
/// lease where the store knows it. Bytes that are not UTF-8 are replaced,
/// never refused: a foreign writer cannot make the lock unreadable.
pub fn holder_from_data(data: &[u8], token: FencingToken, ttl_left: Option<Duration>) -> LockInfo {
    let (owner, value) = match data.iter().position(|&b| b == SEPARATOR) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    LockInfo::new(String::from_utf8_lossy(owner), token, ttl_left)
        .with_value(String::from_utf8_lossy(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_value_stores_the_owner_alone() {
        let data = holder_data("host/1/abc", "");
        assert!(matches!(data, Cow::Borrowed(_)));
        assert_eq!(&*data, b"host/1/abc");
        let info = holder_from_data(&data, FencingToken::new(7), None);
        assert_eq!(
            (info.owner.as_str(), info.value.as_str()),
            ("host/1/abc", "")
        );
    }

    #[test]
    fn values_round_trip_with_newlines_and_non_ascii() {
        for value in ["v", "two\nlines\n", "\n", "é ü", "a b"] {
            let data = holder_data("h/1/ab", value);
            let info = holder_from_data(&data, FencingToken::new(1), None);
            assert_eq!(
                (info.owner.as_str(), info.value.as_str()),
                ("h/1/ab", value)
            );
        }
    }
}
