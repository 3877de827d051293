//! The record a lock file holds: the last fencing token, the owner id of
//! the acquisition that took it, and that holder's value, checksummed so
//! that a reader racing a write never takes a mix of two records for one.
//!
//! ```text
//!  7                                  ← a space, then the token
//! host/1234/4f0c…                     ← the owner id
//! value 11 9c4e21d07a3b5f18           ← value length in bytes, checksum
//! 10.0.0.7:80                         ← the value (any bytes of UTF-8,
//!                                        newlines included), then `\n`
//! ```
//!
//! Every record is written with one `pwrite` at offset 0, padded with
//! newlines over the rest of the previous record; a reader in another
//! process may read while that write copies bytes in, and see some bytes
//! old and some new. So:
//!
//! * the first byte of every checksummed record is a space: whatever mix a
//!   reader sees of two such records starts with it, and is then only
//!   accepted if the checksum (over token line, owner line and value)
//!   checks out; a mix does not, and the reader reads again;
//! * a record starting with a digit is the format of earlier versions
//!   (`token\nowner\n`, no value); readers take it as value-less, and
//!   since no checksum guards it, only once two reads agree;
//! * both formats start with the token line, with surrounding whitespace,
//!   and earlier versions ignore everything after the owner line: they read
//!   checksummed records too.

use std::io::Write as _;

use lock_core::MAX_VALUE_LEN;

/// The tag that starts the value line.
const VALUE_TAG: &str = "value";

/// What a lock file records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// The last token issued.
    pub(crate) token: u64,
    /// The owner id of the acquisition that took it; `None` if the owner
    /// line is missing or empty.
    pub(crate) owner: Option<String>,
    /// That holder's value (empty: none, or a record of the older format).
    pub(crate) value: String,
}

/// Which format a record was read in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// Checksummed: a record read this way was written whole.
    Checked,
    /// The older `token\nowner\n` format: nothing tells a torn read apart.
    Plain,
}

/// Why bytes are not a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unreadable {
    /// The first line is not a token: not a file distlock wrote.
    NoToken,
    /// A checksummed record that does not check out: read while a write
    /// was copying it in (read again), or damaged.
    Torn,
}

/// The record bytes for `token`, `owner` (newlines in it become spaces)
/// and `value`, padded with newlines to at least `pad_to` bytes.
pub(crate) fn encode(token: u64, owner: &str, value: &str, pad_to: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(pad_to.max(owner.len() + value.len() + 64));
    // Writing to a Vec cannot fail.
    let _ = writeln!(out, " {token}");
    out.extend(owner.bytes().map(|b| match b {
        b'\n' | b'\r' => b' ',
        b => b,
    }));
    out.push(b'\n');
    let sum = checksum(&out, value.as_bytes());
    let _ = writeln!(out, "{VALUE_TAG} {} {sum:016x}", value.len());
    out.extend_from_slice(value.as_bytes());
    out.push(b'\n');
    if out.len() < pad_to {
        out.resize(pad_to, b'\n');
    }
    out
}

/// Reads a record from the start of `bytes` (what follows it is ignored);
/// `None` for an empty (never stamped) file.
pub(crate) fn parse(bytes: &[u8]) -> Result<Option<(Record, Format)>, Unreadable> {
    match bytes.first() {
        None => Ok(None),
        Some(b' ') => parse_checked(bytes)
            .map(|record| Some((record, Format::Checked)))
            .ok_or(Unreadable::Torn),
        Some(_) => parse_plain(bytes).map(|record| Some((record, Format::Plain))),
    }
}

/// The token alone, as an acquisition reads it (holding the lock, so no
/// write races it): the first line, either format. `None` for an empty
/// file.
pub(crate) fn parse_token(bytes: &[u8]) -> Result<Option<u64>, Unreadable> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    std::str::from_utf8(line)
        .ok()
        .and_then(|line| line.trim().parse::<u64>().ok())
        .map(Some)
        .ok_or(Unreadable::NoToken)
}

fn parse_checked(bytes: &[u8]) -> Option<Record> {
    let (token_line, rest) = split_line(bytes)?;
    let token = std::str::from_utf8(token_line)
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?;
    let (owner_line, rest) = split_line(rest)?;
    let head = &bytes[..bytes.len() - rest.len()];
    let (value_line, rest) = split_line(rest)?;
    let mut fields = std::str::from_utf8(value_line).ok()?.split(' ');
    if fields.next()? != VALUE_TAG {
        return None;
    }
    let (len_field, sum_field) = (fields.next()?, fields.next()?);
    let len: usize = len_field.parse().ok()?;
    let sum = u64::from_str_radix(sum_field, 16).ok()?;
    // Only the spelling `encode` writes: the checksum does not cover this
    // line, so no variant of it may read the same.
    let canonical = len_field == len.to_string() && sum_field == format!("{sum:016x}");
    if !canonical || fields.next().is_some() || len > MAX_VALUE_LEN || rest.get(len) != Some(&b'\n')
    {
        return None;
    }
    let value = &rest[..len];
    if checksum(head, value) != sum {
        return None;
    }
    let owner = std::str::from_utf8(owner_line).ok()?;
    Some(Record {
        token,
        owner: (!owner.is_empty()).then(|| owner.to_owned()),
        value: std::str::from_utf8(value).ok()?.to_owned(),
    })
}

/// `token\nowner\n`, anything after the owner line ignored; only a
/// complete (newline-terminated) owner line counts.
fn parse_plain(bytes: &[u8]) -> Result<Record, Unreadable> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.split('\n');
    let token = lines
        .next()
        .and_then(|line| line.trim().parse::<u64>().ok())
        .ok_or(Unreadable::NoToken)?;
    let owner = match (lines.next(), lines.next()) {
        (Some(owner), Some(_)) if !owner.is_empty() => Some(owner.to_owned()),
        _ => None,
    };
    Ok(Record {
        token,
        owner,
        value: String::new(),
    })
}

/// The line at the start of `bytes` (without its newline) and the rest;
/// `None` if no newline ends it.
fn split_line(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = bytes.iter().position(|&b| b == b'\n')?;
    Some((&bytes[..end], &bytes[end + 1..]))
}

/// A 64-bit checksum of the head (token and owner lines) and the value.
/// Eight bytes a step: each step is a bijection of the state for a given
/// word, so a change confined to one word always changes the result, and
/// other mixes match with odds of about 2^-64. Not a defence against
/// someone forging records: anyone who can write the file can take the
/// lock's token counter anyway.
fn checksum(head: &[u8], value: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mix = |h: u64, word: u64| (h ^ word).wrapping_mul(K).rotate_left(29);
    let mut h = K;
    for part in [head, value] {
        let mut words = part.chunks_exact(8);
        for word in &mut words {
            h = mix(h, u64::from_le_bytes(word.try_into().unwrap_or_default()));
        }
        let tail = words.remainder();
        let mut last = [0u8; 8];
        last[..tail.len()].copy_from_slice(tail);
        h = mix(h, u64::from_le_bytes(last));
        h = mix(h, part.len() as u64);
    }
    // Final avalanche (murmur3's fmix64).
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(token: u64, owner: Option<&str>, value: &str) -> Record {
        Record {
            token,
            owner: owner.map(str::to_owned),
            value: value.to_owned(),
        }
    }

    fn checked(bytes: &[u8]) -> Record {
        match parse(bytes) {
            Ok(Some((record, Format::Checked))) => record,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bytes)),
        }
    }

    #[test]
    fn values_round_trip_byte_for_byte() {
        let longest = "é".repeat(MAX_VALUE_LEN / 2);
        for value in [
            "",
            "10.0.0.7:8080",
            " spaces ",
            "two\nlines\n",
            "\n\n",
            "ünï ✓",
            &longest,
        ] {
            let bytes = encode(42, "host/1/ab", value, 0);
            assert_eq!(checked(&bytes), record(42, Some("host/1/ab"), value));
        }
    }

    #[test]
    fn padding_and_trailing_bytes_are_ignored() {
        let long = encode(
            9,
            "a-much-longer-owner/1/x",
            "a long value\nof two lines",
            0,
        );
        let mut short = encode(10, "me/1/y", "v", long.len());
        assert_eq!(short.len(), long.len());
        assert_eq!(checked(&short), record(10, Some("me/1/y"), "v"));
        // Unpadded over a longer record: the old tail stays, and is ignored.
        short.truncate(encode(10, "me/1/y", "v", 0).len());
        short.extend_from_slice(&long[short.len()..]);
        assert_eq!(checked(&short), record(10, Some("me/1/y"), "v"));
    }

    #[test]
    fn newlines_in_the_owner_become_spaces() {
        let bytes = encode(1, "a\nb\rc", "", 0);
        assert_eq!(checked(&bytes).owner.as_deref(), Some("a b c"));
    }

    #[test]
    fn the_older_format_still_reads_as_value_less() {
        assert_eq!(parse(b"").unwrap(), None);
        let plain = |bytes: &[u8]| match parse(bytes) {
            Ok(Some((record, Format::Plain))) => record,
            other => panic!("{bytes:?}: {other:?}"),
        };
        assert_eq!(plain(b"7\nh/1/u\n"), record(7, Some("h/1/u"), ""));
        assert_eq!(plain(b"7\nh/1/u\nold tail"), record(7, Some("h/1/u"), ""));
        assert_eq!(plain(b"7\nh/1/"), record(7, None, ""));
        assert_eq!(plain(b"7\n"), record(7, None, ""));
        assert_eq!(plain(b"7"), record(7, None, ""));
    }

    #[test]
    fn a_file_without_a_token_is_an_error() {
        for bad in [&b"x\n"[..], b"\n", b"-1\n", b"99999999999999999999999\n"] {
            assert_eq!(parse(bad), Err(Unreadable::NoToken), "{bad:?}");
            assert_eq!(parse_token(bad), Err(Unreadable::NoToken), "{bad:?}");
        }
    }

    #[test]
    fn the_token_alone_reads_from_either_format() {
        assert_eq!(parse_token(b""), Ok(None));
        assert_eq!(parse_token(b"7\nh/1/u\n"), Ok(Some(7)));
        assert_eq!(parse_token(&encode(8, "o", "v\n", 0)), Ok(Some(8)));
        // Earlier versions read the token line the same way.
        let line = String::from_utf8(encode(9, "o", "", 0)).unwrap();
        assert_eq!(
            line.split('\n').next().unwrap().trim().parse::<u64>(),
            Ok(9)
        );
    }

    /// Every mix of two records that a racing read can see (a prefix of
    /// one and the rest of the other, both ways round) reads back as one
    /// of the two records or as torn; never as anything else.
    #[test]
    fn a_torn_read_is_never_taken_for_a_record() {
        let pairs = [
            (
                encode(4, "host-a/1/aaaa", "", 0),
                encode(5, "host-b/22/bb", "x", 0),
            ),
            (
                encode(4, "a", "", 0),
                encode(5, "a-much-longer-owner/1/x", "value", 0),
            ),
            (
                encode(4, "same/1/u", "old value", 0),
                encode(4, "same/1/u", "new\nvalue", 0),
            ),
            (
                encode(9, "same/1/u", "\n\n\n\n\n\n\n\n\n\n", 0),
                encode(10, "same/1/u", "", 0),
            ),
            (b"4\nlegacy-owner\n".to_vec(), encode(5, "new/1/u", "v", 0)),
        ];
        for (a, b) in pairs {
            let len = a.len().max(b.len());
            let (a, b) = (pad(&a, len), pad(&b, len));
            let whole = [checked_or_plain(&a), checked_or_plain(&b)];
            for cut in 0..=len {
                for (first, second) in [(&a, &b), (&b, &a)] {
                    let mut mixed = first[..cut].to_vec();
                    mixed.extend_from_slice(&second[cut..]);
                    match parse(&mixed) {
                        Ok(Some((record, Format::Checked))) => {
                            assert!(whole.contains(&record), "cut {cut}: {record:?}")
                        }
                        Err(Unreadable::Torn) => {}
                        // Only a mix that starts with the older format
                        // reads as it, and that is checked by a second read.
                        Ok(Some((_, Format::Plain))) => assert!(mixed[0].is_ascii_digit()),
                        other => panic!("cut {cut}: {other:?}"),
                    }
                }
            }
        }
    }

    fn pad(bytes: &[u8], len: usize) -> Vec<u8> {
        let mut bytes = bytes.to_vec();
        bytes.resize(len, b'\n');
        bytes
    }

    fn checked_or_plain(bytes: &[u8]) -> Record {
        parse(bytes).unwrap().unwrap().0
    }

    #[test]
    fn a_change_in_any_byte_of_a_record_is_caught() {
        let bytes = encode(12, "host/1/u", "some value", 0);
        // All but the final newline, which ends the record and is not read.
        for at in 0..bytes.len() - 1 {
            for bit in 0..8 {
                let mut changed = bytes.clone();
                changed[at] ^= 1 << bit;
                let parsed = parse(&changed);
                assert!(
                    parsed.is_err()
                        || parsed
                            .as_ref()
                            .is_ok_and(|p| p.as_ref().is_some_and(|(_, f)| *f == Format::Plain)),
                    "byte {at} bit {bit}: {parsed:?}"
                );
            }
        }
    }
}
