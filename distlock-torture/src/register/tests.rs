use super::*;

fn begin(key: &str, token: u64, claim: u64) -> Op {
    Op::Begin {
        key: key.into(),
        token,
        claim,
    }
}

fn write(key: &str, token: u64, claim: u64) -> Op {
    Op::Write {
        key: key.into(),
        token,
        claim,
    }
}

fn end(key: &str) -> Op {
    Op::End { key: key.into() }
}

/// Checks that the register counted no overlap, no unsafe write accepted
/// and no token going backwards.
fn assert_nothing_unsafe(r: &Register) {
    let f = r.figures();
    assert_eq!(
        (f.overlaps, f.unsafe_accepted, f.token_regressions),
        (0, 0, 0)
    );
}

/// Checks that the register counted one token going backwards and the one
/// unsafe write it let through.
fn assert_one_regression_let_a_write_through(r: &Register) {
    let f = r.figures();
    assert_eq!((f.token_regressions, f.unsafe_accepted), (1, 1));
}

/// A register in which client 1 began holding `k` (token 1, claimed at
/// 10) and client 2 took it over (token 2, claimed at 20).
fn taken_over() -> Register {
    let r = Register::new();
    r.apply_at(1, begin("k", 1, 10), 11);
    r.apply_at(2, begin("k", 2, 20), 21);
    r
}

/// A register in which clients 1 and 2 hold the two permits of
/// `permits-2-0` (tokens 1 and 2, claimed at 10 and 12).
fn two_permit_holders() -> Register {
    let r = Register::new();
    r.apply_at(1, begin("permits-2-0", 1, 10), 11);
    r.apply_at(2, begin("permits-2-0", 2, 12), 13);
    r
}

#[test]
fn clean_hand_offs_count_nothing_unsafe() {
    let r = Register::new();
    assert_eq!(r.apply_at(1, begin("k", 1, 10), 11), Verdict::Accepted);
    assert_eq!(r.apply_at(1, write("k", 1, 12), 13), Verdict::Accepted);
    r.apply_at(1, end("k"), 14);
    assert_eq!(r.apply_at(2, begin("k", 2, 15), 16), Verdict::Accepted);
    let f = r.figures();
    assert_eq!((f.acquisitions, f.writes_accepted), (2, 1));
    assert_eq!(
        (f.overlaps, f.unsafe_accepted, f.token_regressions),
        (0, 0, 0)
    );
}

#[test]
fn a_replaced_holder_claiming_its_lock_after_the_takeover_is_an_overlap() {
    let r = taken_over();
    // Its guard said "held" at 30, after the new holder began at 21.
    assert_eq!(r.apply_at(1, write("k", 1, 30), 31), Verdict::Stale);
    let f = r.figures();
    assert_eq!((f.overlaps, f.stale_rejected, f.unsafe_accepted), (1, 1, 0));
}

#[test]
fn a_write_claimed_before_the_takeover_but_arriving_after_is_fenced_not_an_overlap() {
    let r = taken_over();
    // Checked at 15 (before the takeover), arrives at 40: the fencing
    // check must refuse it, and no guard lied.
    assert_eq!(r.apply_at(1, write("k", 1, 15), 40), Verdict::Stale);
    let f = r.figures();
    assert_eq!((f.overlaps, f.stale_rejected), (0, 1));
}

#[test]
fn tokens_going_backwards_let_a_replaced_holders_write_through_and_are_counted() {
    let r = Register::new();
    r.apply_at(1, begin("k", 5, 10), 11);
    // A restarted store hands out a lower token to someone else.
    assert_eq!(r.apply_at(2, begin("k", 1, 20), 21), Verdict::Stale);
    assert_eq!(r.apply_at(1, write("k", 5, 15), 30), Verdict::Accepted);
    assert_one_regression_let_a_write_through(&r);
}

#[test]
fn a_token_handed_to_two_clients_is_unsafe() {
    let r = Register::new();
    r.apply_at(1, begin("k", 3, 10), 11);
    r.apply_at(1, end("k"), 12);
    assert_eq!(r.apply_at(2, begin("k", 3, 20), 21), Verdict::Accepted);
    assert_one_regression_let_a_write_through(&r);
}

#[test]
fn keys_are_judged_apart() {
    let r = Register::new();
    r.apply_at(1, begin("a", 7, 10), 11);
    r.apply_at(2, begin("b", 1, 12), 13);
    r.apply_at(1, write("a", 7, 14), 15);
    assert_nothing_unsafe(&r);
    assert_eq!(r.holders(), BTreeSet::from([1, 2]));
}

#[test]
fn permits_up_to_the_limit_hold_side_by_side() {
    let r = Register::new();
    r.apply_at(1, begin("permits-2-0", 4, 10), 11);
    r.apply_at(2, begin("permits-2-0", 5, 12), 13);
    // Lower token than the newest permit: not stale, permits share.
    assert_eq!(
        r.apply_at(1, write("permits-2-0", 4, 14), 15),
        Verdict::Accepted
    );
    r.apply_at(2, end("permits-2-0"), 16);
    r.apply_at(3, begin("permits-2-0", 6, 17), 18);
    r.apply_at(1, write("permits-2-0", 4, 19), 20);
    assert_nothing_unsafe(&r);
    assert_eq!(r.figures().stale_rejected, 0);
}

#[test]
fn a_permit_holder_past_the_limit_claiming_its_permit_is_an_overlap() {
    let r = two_permit_holders();
    // Client 1 goes silent (frozen); client 2 writes on.
    r.apply_at(2, write("permits-2-0", 2, 30), 31);
    // A third holder: one of the first two must have lost its permit.
    r.apply_at(3, begin("permits-2-0", 3, 40), 41);
    r.apply_at(2, write("permits-2-0", 2, 50), 51);
    assert_eq!(r.figures().overlaps, 0);
    // The frozen one wakes and its guard says "held": three held at 40.
    r.apply_at(1, write("permits-2-0", 1, 60), 61);
    let f = r.figures();
    assert_eq!((f.overlaps, f.permits, f.acquisitions), (1, 3, 3));
}

#[test]
fn a_permit_lost_while_its_holder_still_spoke_is_no_overlap() {
    let r = two_permit_holders();
    // Client 1, cut off from the store, says "held" until its lease
    // runs out at 40; client 2 last spoke at 12.
    r.apply_at(1, write("permits-2-0", 1, 39), 40);
    // The store gives client 1's lapsed permit to client 3.
    r.apply_at(3, begin("permits-2-0", 3, 45), 46);
    r.apply_at(2, write("permits-2-0", 2, 50), 51);
    r.apply_at(
        1,
        Op::Lost {
            key: "permits-2-0".into(),
        },
        52,
    );
    r.apply_at(3, write("permits-2-0", 3, 55), 56);
    assert_eq!(r.figures().overlaps, 0);
}

#[test]
fn the_longest_wait_while_nobody_holds_is_kept() {
    let r = Register::new();
    r.apply_at(1, begin("k", 1, 0), 1_000_000);
    r.apply_at(2, Op::Waiting { key: "k".into() }, 2_000_000);
    // Holder killed at 5 ms; the waiter gets the lock at 12 ms.
    r.apply_at(1, Op::Lost { key: "k".into() }, 5_000_000);
    r.apply_at(2, begin("k", 2, 0), 12_000_000);
    assert_eq!(r.figures().longest_idle_wait_ms, 7);
    assert_eq!(r.figures().losses, 1);
}

const SEM: &str = "permits-2-0";

fn lost(key: &str) -> Op {
    Op::Lost { key: key.into() }
}

/// Client `client` begins a permit of [`SEM`] claimed at `from` and
/// claims it again at `to` (each arriving a nanosecond later).
fn hold_permit(r: &Register, client: ClientId, from: u64, to: u64) {
    r.apply_at(client, begin(SEM, u64::from(client), from), from + 1);
    r.apply_at(client, write(SEM, u64::from(client), to), to + 1);
}

#[test]
fn staggered_permits_three_held_at_once_are_an_overlap_after_the_first_ended() {
    // Limit 2; held 10–20, 12–22, 14–24: all three during 14–20.
    let r = Register::new();
    r.apply_at(1, begin(SEM, 1, 10), 11);
    r.apply_at(2, begin(SEM, 2, 12), 13);
    r.apply_at(3, begin(SEM, 3, 14), 15);
    r.apply_at(1, write(SEM, 1, 20), 21);
    r.apply_at(1, end(SEM), 22);
    assert_eq!(r.figures().overlaps, 0);
    // Client 2's report shows it held through 14, beside 1 and 3.
    r.apply_at(2, write(SEM, 2, 22), 23);
    assert_eq!(r.figures().overlaps, 1);
    r.apply_at(2, end(SEM), 24);
    // Client 3's too (counted once per holding whose report shows it).
    r.apply_at(3, write(SEM, 3, 24), 25);
    r.apply_at(3, end(SEM), 26);
    assert_eq!(r.figures().overlaps, 2);
}

#[test]
fn a_permit_reported_late_is_judged_at_its_claim_against_ended_holdings() {
    let r = Register::new();
    hold_permit(&r, 1, 10, 20);
    r.apply_at(1, end(SEM), 21);
    hold_permit(&r, 2, 12, 22);
    r.apply_at(2, end(SEM), 23);
    // Client 3's acquisition returned before 14; its report arrives at 30.
    r.apply_at(3, begin(SEM, 3, 14), 30);
    assert_eq!(r.figures().overlaps, 1);
}

#[test]
fn permits_ending_where_others_begin_are_not_counted_together() {
    // 10–20, 20–30, 20–30 with limit 2: an end and a start at the same
    // instant are ordered end first, so at most 2 hold at any instant.
    let r = Register::new();
    r.apply_at(1, begin(SEM, 1, 10), 11);
    r.apply_at(1, write(SEM, 1, 20), 21);
    r.apply_at(2, begin(SEM, 2, 20), 22);
    r.apply_at(3, begin(SEM, 3, 20), 23);
    r.apply_at(1, end(SEM), 24);
    r.apply_at(2, write(SEM, 2, 30), 31);
    r.apply_at(3, write(SEM, 3, 30), 32);
    assert_nothing_unsafe(&r);
}

#[test]
fn a_lost_permit_counts_until_its_last_claim() {
    let r = Register::new();
    r.apply_at(1, begin(SEM, 1, 10), 11);
    r.apply_at(2, begin(SEM, 2, 12), 13);
    r.apply_at(3, begin(SEM, 3, 20), 21);
    // Client 1 said "held" at 30, then was told of the loss.
    r.apply_at(1, write(SEM, 1, 30), 31);
    r.apply_at(1, lost(SEM), 32);
    // Client 2 held from 12 to 40: at 20, three held.
    r.apply_at(2, write(SEM, 2, 40), 41);
    assert_eq!(r.figures().overlaps, 1);
}

#[test]
fn a_lost_permit_does_not_count_after_its_last_claim() {
    let r = Register::new();
    hold_permit(&r, 1, 10, 30);
    r.apply_at(2, begin(SEM, 2, 12), 13);
    // Client 3 takes the permit client 1 lost; 1 hears of it only at 60.
    r.apply_at(3, begin(SEM, 3, 35), 36);
    r.apply_at(3, write(SEM, 3, 45), 46);
    r.apply_at(2, write(SEM, 2, 50), 51);
    r.apply_at(1, lost(SEM), 60);
    r.apply_at(2, write(SEM, 2, 70), 71);
    r.apply_at(3, write(SEM, 3, 70), 72);
    assert_nothing_unsafe(&r);
    assert_eq!(r.figures().losses, 1);
}

#[test]
fn a_killed_permit_holders_span_still_counts() {
    let r = Register::new();
    hold_permit(&r, 1, 10, 30);
    r.apply_at(2, begin(SEM, 2, 12), 13);
    r.apply_at(3, begin(SEM, 3, 20), 21);
    r.gone_at(1, 31);
    r.apply_at(2, write(SEM, 2, 40), 41);
    assert_eq!(r.figures().overlaps, 1);
}

#[test]
fn short_permits_handed_on_beside_a_long_one_never_exceed_the_limit() {
    let r = Register::new();
    hold_permit(&r, 1, 10, 100);
    for client in 2..10 {
        let from = u64::from(client) * 10;
        hold_permit(&r, client, from, from + 10);
        r.apply_at(client, end(SEM), from + 11);
    }
    r.apply_at(1, write(SEM, 1, 110), 111);
    assert_nothing_unsafe(&r);
}

#[test]
fn locks_are_still_judged_by_takeovers_only() {
    let r = taken_over();
    // Client 1 ended before the takeover was reported: no span is kept
    // for a lock, and nothing is counted.
    r.apply_at(1, end("k"), 22);
    assert_eq!(r.apply_at(2, write("k", 2, 30), 31), Verdict::Accepted);
    assert_nothing_unsafe(&r);
    // A late claim from a replaced holder is still an overlap.
    let r = taken_over();
    assert_eq!(r.apply_at(1, write("k", 1, 25), 26), Verdict::Stale);
    assert_eq!(r.figures().overlaps, 1);
}

const RW: &str = "rw-0";

fn begin_read(token: u64, claim: u64) -> Op {
    Op::BeginRead {
        key: RW.into(),
        token,
        claim,
    }
}

fn read(token: u64, claim: u64) -> Op {
    Op::Read {
        key: RW.into(),
        token,
        claim,
    }
}

#[test]
fn readers_side_by_side_are_fine() {
    let r = Register::new();
    r.apply_at(1, begin_read(1, 10), 11);
    r.apply_at(2, begin_read(2, 12), 13);
    r.apply_at(3, begin_read(3, 14), 15);
    assert_eq!(r.apply_at(1, read(1, 20), 21), Verdict::Accepted);
    assert_eq!(r.apply_at(2, read(2, 22), 23), Verdict::Accepted);
    r.apply_at(1, end(RW), 24);
    assert_eq!(r.apply_at(3, read(3, 30), 31), Verdict::Accepted);
    assert_nothing_unsafe(&r);
    let f = r.figures();
    assert_eq!(
        (f.acquisitions, f.writes_accepted, f.stale_rejected),
        (3, 0, 0)
    );
}

#[test]
fn a_reader_beside_a_writer_is_an_overlap_even_after_one_ended() {
    let r = Register::new();
    r.apply_at(1, begin_read(1, 10), 11);
    r.apply_at(2, begin(RW, 2, 15), 16);
    r.apply_at(2, write(RW, 2, 25), 26);
    r.apply_at(2, end(RW), 27);
    // The reader's guard said "held" at 20, after the writer began at 15.
    r.apply_at(1, read(1, 20), 30);
    assert_eq!(r.figures().overlaps, 1);
}

#[test]
fn a_writer_beginning_inside_an_ended_readers_span_is_an_overlap() {
    let r = Register::new();
    r.apply_at(1, begin_read(1, 10), 11);
    r.apply_at(1, read(1, 20), 21);
    r.apply_at(1, end(RW), 22);
    // The writer's acquisition returned before 15; its report comes late.
    r.apply_at(2, begin(RW, 2, 15), 30);
    assert_eq!(r.figures().overlaps, 1);
}

#[test]
fn a_writer_after_the_readers_ended_is_fine_and_fences_their_late_reads() {
    let r = Register::new();
    r.apply_at(1, begin_read(1, 10), 11);
    r.apply_at(2, begin_read(2, 12), 13);
    r.apply_at(1, read(1, 18), 19);
    r.apply_at(1, end(RW), 20);
    // Reader 2 lost its lock after 19 (its lease ran out); the writer
    // takes it.
    assert_eq!(r.apply_at(3, begin(RW, 3, 22), 23), Verdict::Accepted);
    assert_eq!(r.apply_at(3, write(RW, 3, 30), 31), Verdict::Accepted);
    // Reader 2's read, checked at 19, arrives after the writer began:
    // fenced, and no overlap.
    assert_eq!(r.apply_at(2, read(2, 19), 32), Verdict::Stale);
    r.apply_at(2, lost(RW), 33);
    assert_nothing_unsafe(&r);
    assert_eq!(r.figures().writes_accepted, 1);
}

#[test]
fn two_writers_of_a_read_write_lock_overlapping_are_judged_as_a_lock() {
    let r = Register::new();
    r.apply_at(1, begin(RW, 1, 10), 11);
    r.apply_at(2, begin(RW, 2, 20), 21);
    // The first writer's guard said "held" after the takeover: fenced,
    // and an overlap.
    assert_eq!(r.apply_at(1, write(RW, 1, 30), 31), Verdict::Stale);
    let f = r.figures();
    assert_eq!((f.overlaps, f.stale_rejected, f.unsafe_accepted), (1, 1, 0));
}

#[test]
fn a_write_below_a_read_already_served_is_stale() {
    let r = Register::new();
    r.apply_at(1, begin(RW, 5, 10), 11);
    // A reader took token 6 while the writer was still (late) writing
    // with a claim from before the reader began.
    r.apply_at(1, end(RW), 12);
    r.apply_at(2, begin_read(6, 20), 21);
    assert_eq!(r.apply_at(1, write(RW, 5, 11), 22), Verdict::Stale);
    assert_nothing_unsafe(&r);
}
