//! The lost-reply scenario (`distlock_testkit::scenarios::lost_reply`:
//! an acquisition whose request reached the store but whose reply never
//! came back leaves nothing behind) does not apply to the file store, for
//! any kind of acquisition: there is no reply to lose. An acquisition is
//! system calls on this host's file system — `open`, `flock`, a write to
//! the open file — each of which returns its outcome to the calling
//! thread or has not happened; nothing is applied "later" by a server
//! after its caller gave up. What comes closest, a call dropped midway
//! (its open file closed, which releases its `flock`), is the conformance
//! suite's `dropped_lock_call_leaves_nothing_behind` and
//! `cancelled_shared_requests_leave_nothing_behind`, which run on this
//! store too.
//!
//! Each case is listed, ignored with the reason, so that the matrix of
//! stores and kinds shows it as not applicable rather than passing.

const NO_REPLY: &str =
    "not applicable: the file store has no reply to lose (system calls, no server)";

#[test]
#[ignore = "not applicable: the file store has no reply to lose (system calls, no server)"]
fn a_lock_whose_reply_was_lost() {
    panic!("{NO_REPLY}");
}

#[test]
#[ignore = "not applicable: the file store has no reply to lose (system calls, no server)"]
fn a_queued_request_whose_reply_was_lost() {
    panic!("{NO_REPLY}");
}

#[test]
#[ignore = "not applicable: the file store has no reply to lose (system calls, no server)"]
fn a_read_lock_whose_reply_was_lost() {
    panic!("{NO_REPLY}");
}

#[test]
#[ignore = "not applicable: the file store has no reply to lose (system calls, no server)"]
fn a_permit_whose_reply_was_lost() {
    panic!("{NO_REPLY}");
}
