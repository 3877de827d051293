//! Exclusive attempts on one lock file: stamping, padding, files of
//! earlier versions, removal on release, exclusion inside a process.

use std::fs;

use super::*;
use crate::create::Sharing;
use crate::probe::{holder, Holder, OnFree};
use crate::record::{self, Record};

const DISK: Disk = Disk {
    sharing: Sharing::Private,
    fsync: false,
};

fn record(token: u64, owner: &str, value: &str) -> Option<Record> {
    Some(Record {
        token,
        owner: Some(owner.to_owned()),
        value: value.to_owned(),
    })
}

fn probe(path: &Path) -> Holder {
    holder(path, OnFree::Keep).unwrap()
}

/// Locks and stamps `path`, which must be free.
fn lock_free(path: &Path, owner: &str, value: &str) -> (Exclusive, u64) {
    match lock_and_stamp(path, owner, value, DISK).unwrap() {
        Attempted::Locked(held, token) => (held, token),
        Attempted::Busy => panic!("free file reported busy"),
    }
}

#[test]
fn stamping_counts_up_records_the_holder_and_release_removes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns").join("k.lock");
    for expected in 1..=3 {
        let (held, token) = lock_free(&path, "me/1/x", "v\n1");
        assert_eq!(token, expected);
        assert_eq!(probe(&path), Holder::Held(record(token, "me/1/x", "v\n1")));
        assert!(held.release().unwrap(), "the file stood");
        assert!(!path.exists(), "the file of a free name stays");
        assert_eq!(probe(&path), Holder::Free);
    }
}

#[test]
fn a_dropped_hold_removes_its_file_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.lock");
    let (held, _) = lock_free(&path, "a", "");
    drop(held);
    assert!(!path.exists());
}

#[test]
fn a_shorter_record_is_padded_and_still_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.lock");
    let (mut held, token) = lock_free(&path, "a", "");
    let locked = held.locked_mut().unwrap();
    locked
        .write_record(token, "a-much-longer-owner/1/x", "a long value")
        .unwrap();
    let long = fs::metadata(&path).unwrap().len();
    locked
        .write_record(token, "a-much-longer-owner/1/x", "")
        .unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), long, "padded");
    assert_eq!(
        probe(&path),
        Holder::Held(record(token, "a-much-longer-owner/1/x", ""))
    );
}

#[test]
fn files_of_the_older_format_keep_counting_from_their_token() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.lock");
    fs::write(&path, "41\nold/1/u\n").unwrap();
    let file = fs::File::open(&path).unwrap();
    assert!(flock(&file, libc::LOCK_EX | libc::LOCK_NB).unwrap());
    assert_eq!(probe(&path), Holder::Held(record(41, "old/1/u", "")));
    drop(file);
    let (held, token) = lock_free(&path, "new/1/u", "v");
    assert_eq!(token, 42);
    held.release().unwrap();
    // The counter carries on once the old file is gone.
    assert_eq!(lock_free(&path, "new/1/u", "v").1, 43);
}

/// A killed holder's long record is covered whole by the next one.
#[test]
fn a_long_record_left_behind_is_covered_whole_by_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.lock");
    let value = "x".repeat(lock_core::MAX_VALUE_LEN);
    fs::write(&path, record::encode(1, "a", &value, 0)).unwrap();
    let long = fs::metadata(&path).unwrap().len();
    let (_held, token) = lock_free(&path, "b", "");
    assert_eq!(token, 2);
    assert_eq!(fs::metadata(&path).unwrap().len(), long);
    assert_eq!(probe(&path), Holder::Held(record(2, "b", "")));
}

#[test]
fn a_second_open_in_the_same_process_is_excluded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.lock");
    let (first, _) = lock_free(&path, "a", "");
    assert!(matches!(
        lock_and_stamp(&path, "b", "", DISK).unwrap(),
        Attempted::Busy
    ));
    drop(first);
    assert!(matches!(
        lock_and_stamp(&path, "b", "", DISK).unwrap(),
        Attempted::Locked(..)
    ));
}

#[test]
fn a_file_without_a_token_is_an_error_and_stays() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.lock");
    fs::write(&path, "not a token\n").unwrap();
    assert!(lock_and_stamp(&path, "a", "", DISK).is_err());
    assert_eq!(fs::read_to_string(&path).unwrap(), "not a token\n");
}

#[test]
fn symlinks_are_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let (path, assert_untouched) = crate::create::tests::planted_symlink(dir.path());
    assert!(lock_and_stamp(&path, "a", "", DISK).is_err());
    assert_untouched();
}

/// A probe that finds the file of a dead holder free removes it, after
/// raising the name's counter to the token it records.
#[test]
fn a_probe_removes_a_free_file_and_keeps_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.lock");
    fs::write(&path, "500\nold/1/u\n").unwrap();
    assert_eq!(holder(&path, OnFree::Remove(DISK)).unwrap(), Holder::Free);
    assert!(!path.exists());
    assert_eq!(lock_free(&path, "new/1/u", "").1, 501);
}

/// Between the attempt's `open` and its `flock`, the holder releases
/// (removing the file) and another takes the name with a new file: the
/// attempt's `flock` on the removed file succeeds, and only the standing
/// check sends it to the new file, which is held.
#[test]
fn a_writer_that_locked_a_removed_file_starts_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.lock");
    let (first, _) = lock_free(&path, "writer", "");
    let second = std::rc::Rc::new(std::cell::RefCell::new(None));
    let hook = {
        let (path, second) = (path.clone(), second.clone());
        move || {
            drop(first);
            *second.borrow_mut() = Some(lock_free(&path, "writer", ""));
        }
    };
    crate::lockfile::BETWEEN_OPEN_AND_FLOCK.with(|h| *h.borrow_mut() = Some(Box::new(hook)));
    let attempt = lock_and_stamp(&path, "late", "", DISK).unwrap();
    assert!(second.borrow().is_some(), "the hook did not run");
    assert!(
        matches!(attempt, Attempted::Busy),
        "two writers at once: {attempt:?}"
    );
}
