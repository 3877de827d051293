//! Where a lock lives: `<dir>/<namespace>/<encoded key>.lock`.
//!
//! The key is encoded into one flat file name that
//!
//! * never leaves the namespace directory: `/` and `.` are encoded, so no
//!   name contains a path separator, is `.`/`..`, or starts with a dot;
//! * is injective on keys: every byte outside `[a-z0-9_-]` (including `%`
//!   itself and upper-case letters) becomes `%XX` with upper-case hex digits,
//!   so decoding is unambiguous. Encoding upper-case letters keeps `Key` and
//!   `key` apart even on case-insensitive file systems: literal letters are
//!   always lower-case and hex digits always upper-case;
//! * fits in a file name (255 bytes on common file systems): an encoding
//!   longer than [`MAX_ENCODED_LEN`] becomes a readable prefix, `~`, and the
//!   hex SHA-256 of the whole key. `~` never occurs in a plain encoding
//!   (it is encoded as `%7E`), so hashed and plain names cannot collide.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use lock_core::LockName;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use sha2::{Digest, Sha256};

/// Suffix of every lock file.
pub(crate) const LOCK_SUFFIX: &str = ".lock";
/// Suffix of a lock file's gate (see [`crate::shared`]).
pub(crate) const GATE_SUFFIX: &str = ".gate";
/// Suffix of a reader's slot file, before its number.
pub(crate) const READER_SUFFIX: &str = ".reader-";
/// Suffix of a semaphore's file (its limit).
pub(crate) const SEMAPHORE_SUFFIX: &str = ".semaphore";
/// Suffix of a semaphore's permit slot file, before its number.
pub(crate) const PERMIT_SUFFIX: &str = ".permit-";
/// Suffix of the directory of readers' files of earlier versions.
pub(crate) const LEGACY_READERS_SUFFIX: &str = ".readers";
/// Suffix of the semaphore directory of earlier versions.
pub(crate) const LEGACY_PERMITS_SUFFIX: &str = ".permits";
/// Longest plain encoding kept as is (before the suffix).
const MAX_ENCODED_LEN: usize = 200;
/// Length of the readable prefix of a hashed name, at most.
const HASHED_PREFIX_LEN: usize = 120;

/// The lock file of `name` under the lock directory `root`.
pub(crate) fn lock_path(root: &Path, name: &LockName) -> PathBuf {
    root.join(name.namespace().as_str())
        .join(file_name(name.key().as_str()))
}

/// `K.lock` → `K<suffix>`: the other files and directories of the name
/// whose lock file is `path`. Encoded keys contain no `.`, so these names
/// never collide with another key's.
pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let stem = name.strip_suffix(LOCK_SUFFIX).unwrap_or(&name);
    path.with_file_name(format!("{stem}{suffix}"))
}

/// The `number`th of the numbered siblings `K<suffix><number>` (reader
/// and permit slots).
pub(crate) fn numbered(path: &Path, suffix: &str, number: u32) -> PathBuf {
    sibling(path, &format!("{suffix}{number}"))
}

/// The file name (with [`LOCK_SUFFIX`]) a key is stored under.
pub(crate) fn file_name(key: &str) -> String {
    let mut name = encode(key);
    if name.len() > MAX_ENCODED_LEN {
        let mut cut = HASHED_PREFIX_LEN;
        // Do not split a `%XX` escape: it only costs readability, but is free to avoid.
        let bytes = name.as_bytes();
        if bytes[cut - 1] == b'%' {
            cut -= 1;
        } else if bytes[cut - 2] == b'%' {
            cut -= 2;
        }
        name.truncate(cut);
        name.push('~');
        for byte in Sha256::digest(key.as_bytes()) {
            let _ = write!(name, "{byte:02x}");
        }
    }
    name.push_str(LOCK_SUFFIX);
    name
}

/// The bytes a file name keeps as they are: `[a-z0-9_-]`; every other
/// byte (upper-case letters too) is percent-encoded.
const ENCODED: AsciiSet = {
    let mut set = NON_ALPHANUMERIC.remove(b'_').remove(b'-');
    let mut letter = b'A';
    while letter <= b'Z' {
        set = set.add(letter);
        letter += 1;
    }
    set
};

/// Percent-encodes every byte outside `[a-z0-9_-]`.
fn encode(key: &str) -> String {
    utf8_percent_encode(key, &ENCODED).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Inverse of the plain encoding, to show it loses nothing.
    fn decode(name: &str) -> String {
        let stem = name.strip_suffix(LOCK_SUFFIX).expect("suffix");
        percent_encoding::percent_decode_str(stem)
            .decode_utf8()
            .unwrap()
            .into_owned()
    }

    fn assert_flat_and_safe(key: &str) {
        let name = file_name(key);
        assert!(!name.contains('/'), "{key:?} -> {name}");
        assert!(!name.starts_with('.'), "{key:?} -> {name}");
        assert!(name.len() <= 255, "{key:?} -> {} bytes", name.len());
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"%_-~.".contains(&b)),
            "{key:?} -> {name}"
        );
    }

    /// Cases per property below.
    const CASES: u32 = 4096;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(CASES))]

        /// Any key (any printable characters, up to twice the hashing
        /// threshold) maps to one flat, safe file name, from which a plain
        /// encoding decodes back to the key.
        #[test]
        fn every_key_maps_to_one_safe_file_name(key in "\\PC{1,400}") {
            assert_flat_and_safe(&key);
            let name = file_name(&key);
            if !name.contains('~') {
                proptest::prop_assert_eq!(decode(&name), key);
            }
        }

        /// Two different keys never share a file, whether their names are
        /// plain, hashed or one of each; keys that differ in case or only
        /// by an escape-looking sequence included.
        #[test]
        fn different_keys_never_share_a_file(
            a in "[a-zA-Z%/.~0-9]{1,260}",
            b in "[a-zA-Z%/.~0-9]{1,260}",
        ) {
            proptest::prop_assume!(a != b);
            proptest::prop_assert_ne!(file_name(&a), file_name(&b));
        }
    }

    #[test]
    fn plain_keys_stay_readable() {
        assert_eq!(file_name("invoices-2026_11"), "invoices-2026_11.lock");
        assert_eq!(file_name("a/b"), "a%2Fb.lock");
        assert_eq!(file_name("with space"), "with%20space.lock");
        // Names already on disk: upper case and non-ASCII bytes as %XX.
        assert_eq!(file_name("Key~é"), "%4Bey%7E%C3%A9.lock");
    }

    #[test]
    fn dots_and_slashes_cannot_escape_the_directory() {
        for key in [
            "..",
            ".",
            "...",
            "a/../../etc",
            "../../../../etc/passwd",
            "a/./b",
            ".hidden",
        ] {
            assert_flat_and_safe(key);
            assert_eq!(decode(&file_name(key)), key);
        }
        assert_eq!(file_name(".."), "%2E%2E.lock");
        assert_eq!(file_name("a/../../etc"), "a%2F%2E%2E%2F%2E%2E%2Fetc.lock");
    }

    #[test]
    fn percent_is_encoded_so_encoded_looking_keys_stay_distinct() {
        assert_ne!(file_name("a/b"), file_name("a%2Fb"));
        assert_eq!(file_name("a%2Fb"), "a%252%46b.lock");
        assert_eq!(decode(&file_name("a%2Fb")), "a%2Fb");
    }

    #[test]
    fn case_differences_survive_case_insensitive_file_systems() {
        let upper = file_name("Key");
        let lower = file_name("key");
        assert_ne!(upper.to_ascii_lowercase(), lower.to_ascii_lowercase());
        assert_eq!(decode(&upper), "Key");
    }

    #[test]
    fn long_keys_are_hashed_into_a_short_name() {
        let long_unicode = "é".repeat(256); // 512 bytes
        let long_ascii = "x".repeat(512);
        for key in [long_unicode.as_str(), long_ascii.as_str()] {
            assert_flat_and_safe(key);
            let name = file_name(key);
            assert!(name.contains('~'), "{name}");
            assert!(name.len() <= HASHED_PREFIX_LEN + 1 + 64 + LOCK_SUFFIX.len());
        }
        // The prefix does not cut an escape in half.
        let prefix = file_name(&long_unicode);
        let prefix = prefix.split('~').next().unwrap();
        assert_eq!(prefix.len() % 3, 0, "{prefix}");
    }

    #[test]
    fn long_keys_sharing_a_prefix_get_different_names() {
        let base = "p".repeat(400);
        let a = format!("{base}/a");
        let b = format!("{base}/b");
        assert_ne!(file_name(&a), file_name(&b));
    }

    #[test]
    fn plain_names_never_contain_the_hash_marker() {
        // `~` in a key is encoded, so a plain name cannot look hashed.
        let tricky = format!("{}~{}", "x".repeat(10), "0".repeat(64));
        assert!(!file_name(&tricky).contains('~'));
    }

    #[test]
    fn names_are_distinct_across_a_mixed_set_of_keys() {
        let long_unicode = "é".repeat(256);
        let near_limit = "y".repeat(MAX_ENCODED_LEN);
        let over_limit = "y".repeat(MAX_ENCODED_LEN + 1);
        let keys = [
            "a",
            "A",
            "a/b",
            "a%2Fb",
            "a%2fb",
            "a/../b",
            "..",
            ".",
            "Key",
            "key",
            "KEY",
            "~",
            "%7E",
            "with space",
            "ünïcødé/鍵 🔒",
            long_unicode.as_str(),
            near_limit.as_str(),
            over_limit.as_str(),
        ];
        let names: HashSet<String> = keys.iter().map(|k| file_name(k)).collect();
        assert_eq!(names.len(), keys.len());
        let folded: HashSet<String> = names.iter().map(|n| n.to_ascii_lowercase()).collect();
        assert_eq!(folded.len(), keys.len(), "case-folding merged two names");
    }

    #[test]
    fn siblings_replace_the_lock_suffix() {
        let lock = Path::new("/d/ns/a%2Fb.lock");
        assert_eq!(sibling(lock, GATE_SUFFIX), Path::new("/d/ns/a%2Fb.gate"));
        assert_eq!(
            numbered(lock, READER_SUFFIX, 3),
            Path::new("/d/ns/a%2Fb.reader-3")
        );
        assert_eq!(
            sibling(lock, SEMAPHORE_SUFFIX),
            Path::new("/d/ns/a%2Fb.semaphore")
        );
        assert_eq!(
            numbered(lock, PERMIT_SUFFIX, 0),
            Path::new("/d/ns/a%2Fb.permit-0")
        );
    }

    #[test]
    fn path_is_namespace_then_flat_name() {
        let name = LockName::parse("billing", "a/../../etc").unwrap();
        let path = lock_path(Path::new("/locks"), &name);
        assert_eq!(
            path,
            Path::new("/locks/billing/a%2F%2E%2E%2F%2E%2E%2Fetc.lock")
        );
        assert_eq!(path.components().count(), 4);
    }
}
