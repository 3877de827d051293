//! Where a lock's fencing counter lives: one counter per namespace, or on
//! a Redis Cluster one per namespace and cluster slot.
//!
//! A counter is shared by every name of its bucket, so what Redis keeps
//! does not grow with the number of names ever locked: one key per
//! namespace on one server, a Sentinel master and each Redlock master, at
//! most [`SLOTS`] per namespace on a cluster. Tokens still rise strictly
//! per name (the counter only ever grows, by `INCR` or a Redlock raise,
//! and every holder of a name draws from the same counter), just not by
//! one: other names of the bucket take values in between.
//!
//! On a cluster a script may only touch keys of one slot, so a lock's
//! counter must hash to the lock's own slot while staying inside the
//! namespace's ACL prefix `distlock:{<ns>:`. Its name is
//! `distlock:{<ns>:%cDDDDDD}:token`, with `DDDDDD` the smallest six-digit
//! number (`000000` to `999999`) whose hash tag `<ns>:%cDDDDDD` falls in
//! that slot. Every client computes the same name, so every holder of a
//! name uses the same counter.
//!
//! Finding the number costs nothing per namespace: Redis hashes a tag
//! with CRC16/XMODEM (initial value 0, no final XOR), which is linear, so
//! for tags of one length `crc(P ‖ S) = crc(P ‖ 0…0) ⊕ crc(S)`. The slot
//! (the low 14 bits) of `<ns>:%cDDDDDD` is therefore the slot of `<ns>:`
//! followed by eight zero bytes, XOR the slot of `%cDDDDDD` alone. A
//! table built once per process gives, for each of the 16,384 values of
//! the latter, the smallest number that produces it (a unit test checks
//! that six digits reach them all), so a lock's counter is one CRC of the
//! lock's tag, one of the namespace and a table look-up. This is the
//! answer a search over the numbers for each (namespace, slot) would
//! give, without keeping a table per namespace in the client.

use std::sync::OnceLock;

/// The number of Redis Cluster hash slots.
pub(crate) const SLOTS: usize = 16_384;

/// How a backend's locks share counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Counters {
    /// One counter per namespace, `distlock:{<ns>:}:token`: one server, a
    /// Sentinel master, each Redlock master.
    PerNamespace,
    /// One counter per namespace and cluster slot,
    /// `distlock:{<ns>:%cDDDDDD}:token`.
    PerSlot,
}

/// What follows the namespace's tag prefix `<ns>:` in a cluster
/// counter's tag, before its digits.
const MARK: &[u8; 2] = b"%c";
/// The number of digits of a cluster counter's number.
const DIGITS: usize = 6;
/// The length of what follows `<ns>:` in a cluster counter's tag.
const BUCKET_LEN: usize = MARK.len() + DIGITS;
/// The numbers a cluster counter may carry: every six-digit one.
const NUMBERS: u32 = 1_000_000;

/// CRC16/XMODEM (polynomial 0x1021, initial value 0, no reflection, no
/// final XOR), byte by byte, as Redis Cluster hashes keys.
const CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// CRC16/XMODEM of `bytes`, continuing from `crc`.
fn crc16(mut crc: u16, bytes: &[u8]) -> u16 {
    for &byte in bytes {
        crc = (crc << 8) ^ CRC16_TABLE[usize::from((crc >> 8) as u8 ^ byte)];
    }
    crc
}

/// The cluster slot of a key whose hash tag is `tag`.
pub(crate) fn slot_of_tag(tag: &[u8]) -> u16 {
    crc16(0, tag) % SLOTS as u16
}

/// The text after `<ns>:` in the tag of cluster counter `number`.
fn bucket(number: u32) -> [u8; BUCKET_LEN] {
    let mut text = [b'0'; BUCKET_LEN];
    text[..MARK.len()].copy_from_slice(MARK);
    let mut rest = number;
    for digit in text[MARK.len()..].iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    text
}

/// For each slot value `v`, the smallest number whose bucket text alone
/// hashes to `v`.
fn smallest_by_slot() -> &'static [u32] {
    static TABLE: OnceLock<Box<[u32]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = vec![u32::MAX; SLOTS].into_boxed_slice();
        let mut filled = 0;
        for number in 0..NUMBERS {
            let slot = usize::from(slot_of_tag(&bucket(number)));
            if table[slot] == u32::MAX {
                table[slot] = number;
                filled += 1;
                if filled == SLOTS {
                    break;
                }
            }
        }
        table
    })
}

/// The number of the cluster counter for a lock in slot `slot` whose
/// namespace's tag prefix is `prefix` (`<encoded ns>:`): the smallest
/// six-digit number whose tag `<prefix>%cDDDDDD` hashes to `slot`.
fn number_for(prefix: &[u8], slot: u16) -> u32 {
    let zeros = crc16(crc16(0, prefix), &[0; BUCKET_LEN]) % SLOTS as u16;
    smallest_by_slot()[usize::from(slot ^ zeros)]
}

impl Counters {
    /// Appends the name of the counter of the lock whose hash tag is
    /// `tag` (`<encoded ns>:<encoded key>`; `prefix_len` bytes of it are
    /// `<encoded ns>:`) to `out`.
    pub(crate) fn push_name(self, out: &mut String, tag: &str, prefix_len: usize) {
        let prefix = &tag[..prefix_len];
        out.push_str("distlock:{");
        out.push_str(prefix);
        if self == Counters::PerSlot {
            let number = number_for(prefix.as_bytes(), slot_of_tag(tag.as_bytes()));
            out.extend(bucket(number).map(char::from));
        }
        out.push_str("}:token");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::tests::hash_tag;
    use redis::cluster_routing::{Route, SlotAddr};

    #[test]
    fn crc16_is_redis_clusters() {
        // The check value the cluster specification gives.
        assert_eq!(crc16(0, b"123456789"), 0x31C3);
        for key in [
            "distlock:{billing:a}",
            "{}",
            "x",
            "distlock:{ns:%c000123}:token",
        ] {
            let ours = match key.find('{').zip(key.find('}')) {
                Some((open, close)) if close > open + 1 => slot_of_tag(hash_tag(key).as_bytes()),
                _ => slot_of_tag(key.as_bytes()),
            };
            assert_eq!(
                Route::new(ours, SlotAddr::Master),
                Route::with_key(key, SlotAddr::Master),
                "{key}"
            );
        }
    }

    #[test]
    fn six_digits_reach_every_slot() {
        let table = smallest_by_slot();
        assert!(table.iter().all(|&n| n < NUMBERS), "a slot is unreachable");
    }

    /// The table gives what a plain search gives: the smallest number
    /// whose whole tag hashes to the slot.
    #[test]
    fn the_number_is_the_smallest_whose_tag_hits_the_slot() {
        for prefix in ["billing:", "a:", "default:", "x.y-z_0:"] {
            let mut first = vec![u32::MAX; SLOTS];
            let mut left = SLOTS;
            let start = crc16(0, prefix.as_bytes());
            for number in 0..NUMBERS {
                let slot = usize::from(crc16(start, &bucket(number)) % SLOTS as u16);
                if first[slot] == u32::MAX {
                    first[slot] = number;
                    left -= 1;
                    if left == 0 {
                        break;
                    }
                }
            }
            for (slot, &number) in first.iter().enumerate() {
                assert_eq!(number_for(prefix.as_bytes(), slot as u16), number);
            }
        }
    }

    #[test]
    fn a_counter_shares_its_locks_slot() {
        for key in ["a", "invoices/2026", "%7D", "ü/x", "k9999"] {
            let tag = format!("ns:{key}");
            let mut name = String::new();
            Counters::PerSlot.push_name(&mut name, &tag, 3);
            assert!(name.starts_with("distlock:{ns:%c") && name.ends_with("}:token"));
            assert_eq!(
                slot_of_tag(hash_tag(&name).as_bytes()),
                slot_of_tag(tag.as_bytes())
            );
            let mut single = String::new();
            Counters::PerNamespace.push_name(&mut single, &tag, 3);
            assert_eq!(single, "distlock:{ns:}:token");
        }
    }

    #[test]
    fn buckets_are_fixed_width() {
        assert_eq!(&bucket(0), b"%c000000");
        assert_eq!(&bucket(42), b"%c000042");
        assert_eq!(&bucket(999_999), b"%c999999");
    }
}
