//! The replacement scenarios' steps: a holder frozen in a child process
//! past its lease, the other kind queued behind it and getting in, and
//! what the resumed child was told and refused.

use std::time::Instant;

use super::{
    accepted_before_the_freeze, holders_are, kind_of, noun, replacing_mode, Child, Holder,
    Replaced, Resumed, RwFaults, RwRegister, RwStore, SHOW_WITHIN,
};
use crate::child::HoldMode;
use crate::{eventually, pause_group, resume_group};

/// A holder of `frozen_mode` in a child process replaced once frozen:
/// the body of [`frozen_writer_is_replaced`](super::frozen_writer_is_replaced)
/// and [`frozen_reader_is_replaced`](super::frozen_reader_is_replaced).
pub(super) async fn replace_frozen(
    plan: &RwFaults<'_>,
    store: &impl RwStore,
    key: &str,
    frozen_mode: HoldMode,
) -> Replaced {
    assert!(plan.lockers.len() >= 2, "two lockers or more");
    let register = RwRegister::new();
    let mut child = Child::spawn(&plan.child, frozen_mode, key, &register).await;
    let frozen = child.holding(frozen_mode).await;
    let look = plan.lockers[0].rwlock(key).expect("the lock");
    holders_are(&look, kind_of(frozen_mode), &[frozen], "before the freeze").await;
    let holders = queue_behind(plan, store, key, &register, (frozen_mode, frozen)).await;
    holders_are(
        &look,
        kind_of(frozen_mode),
        &[frozen],
        "with the others queued",
    )
    .await;

    pause_group(child.pid()).await.expect("freeze the child");
    let paused_at = Instant::now();
    let replacing = got_in(plan, &holders, paused_at, frozen).await;
    let mode = replacing_mode(frozen_mode);
    holders_are(&look, kind_of(mode), &replacing, "the child frozen").await;
    each_used_the_register(&register, &replacing).await;
    accepted_before_the_freeze(&mut child);

    let resumed_from = register.next_seq();
    resume_group(child.pid()).expect("resume the child");
    let resumed = child.until_released(plan.within + SHOW_WITHIN).await;
    told_and_fenced(plan, &child.who, &resumed, (frozen, &replacing));

    // The replacing holders kept their lock through the child's return.
    holders_are(&look, kind_of(mode), &replacing, "the child resumed").await;
    for holder in holders {
        holder.finish().await;
    }
    never_together(&register, &child.who, resumed_from);
    // What the register refused is exactly what the child did once resumed.
    assert_eq!(
        register.refused(),
        resumed.accesses,
        "the register's refusals"
    );
    writes_end_with_the_rightful_writer(&register, frozen_mode, (frozen, &replacing));
    Replaced {
        frozen,
        replacing,
        resumed,
    }
}

/// Waits until each replacing holder (by token, `replacing`) made an
/// accepted access to `register`: they used it before the child wakes.
async fn each_used_the_register(register: &RwRegister, replacing: &[u64]) {
    let used = "each replacing holder's first access";
    eventually(SHOW_WITHIN, used, || async {
        let ops = register.ops();
        replacing
            .iter()
            .all(|t| ops.iter().any(|op| op.token == *t && op.refused.is_none()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Panics unless the register's writes end with the writer that rightly
/// held last: with a frozen writer (token `frozen`), no late write landed
/// and the last write is its own, from before the freeze; with a frozen
/// reader, the highest write is the replacing writer's.
fn writes_end_with_the_rightful_writer(
    register: &RwRegister,
    frozen_mode: HoldMode,
    (frozen, replacing): (u64, &[u64]),
) {
    if frozen_mode == HoldMode::Write {
        // No late write landed: the last write is the child's, from before.
        let last = register.writes().last_write().map(|(token, _)| token);
        assert_eq!(last, Some(frozen), "a write after the frozen writer's");
    } else {
        let highest = register.writes().highest();
        assert_eq!(
            highest,
            replacing.last().copied(),
            "the replacing writer's writes"
        );
    }
}

/// The other kind — two readers, or one writer — queued behind the live
/// child holding `frozen` in its mode: seen waiting in `store`, none of
/// them let in meanwhile.
async fn queue_behind(
    plan: &RwFaults<'_>,
    store: &impl RwStore,
    key: &str,
    register: &RwRegister,
    (frozen_mode, frozen): (HoldMode, u64),
) -> Vec<Holder> {
    let mode = replacing_mode(frozen_mode);
    let count = if mode == HoldMode::Read { 2 } else { 1 };
    let wait = plan.within * 2 + SHOW_WITHIN;
    let holders: Vec<Holder> = (0..count)
        .map(|i| {
            let who = format!("{} {}", noun(mode), i + 1);
            let locker = &plan.lockers[i % plan.lockers.len()];
            Holder::spawn(locker, key, mode, register, (who, wait))
        })
        .collect();
    let beside = format!(
        "beside the live child {} (token {frozen})",
        noun(frozen_mode)
    );
    let queued = format!("{count} {}(s) waiting in the store", noun(mode));
    eventually(SHOW_WITHIN, &queued, || async {
        holders.iter().for_each(|h| h.assert_out(&beside));
        match store.waiting(key).await? {
            n if n == count => Ok(()),
            n => Err(format!("{n} waiting")),
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    holders.iter().for_each(|h| h.assert_out(&beside));
    holders
}

/// The tokens, in order, of `holders` once each got in: no sooner than
/// the lease of the child frozen at `paused_at` ran out, above its token
/// `frozen`.
async fn got_in(
    plan: &RwFaults<'_>,
    holders: &[Holder],
    paused_at: Instant,
    frozen: u64,
) -> Vec<u64> {
    let mut replacing = Vec::new();
    for holder in holders {
        let (token, at) = holder.granted(plan.within).await;
        let after = at.duration_since(paused_at);
        assert!(
            after >= plan.lease_left,
            "{} got in {after:?} after the freeze, while the frozen child's lease still ran \
             (at least {:?})",
            holder.who,
            plan.lease_left
        );
        assert!(
            token > frozen,
            "{}'s token {token} is not above the frozen child's {frozen}",
            holder.who
        );
        replacing.push(token);
    }
    replacing.sort_unstable();
    replacing
}

/// Panics unless the resumed child `who` (token `frozen`) made an access,
/// each one refused, heard one of the plan's loss reasons, and found its
/// lock lost when it released.
fn told_and_fenced(
    plan: &RwFaults<'_>,
    who: &str,
    resumed: &Resumed,
    (frozen, replacing): (u64, &[u64]),
) {
    assert!(
        !resumed.accesses.is_empty(),
        "{who} made no access once resumed"
    );
    for op in &resumed.accesses {
        assert_eq!(op.token, frozen, "{who}: {op:?}");
        assert!(
            op.refused.is_some(),
            "{who}'s late {:?} with token {frozen} was accepted, after {replacing:?} got in: \
             {op:?}",
            op.access,
        );
    }
    assert!(
        plan.reasons.contains(&resumed.lost.as_str()),
        "{who} heard {}, not one of {:?}",
        resumed.lost,
        plan.reasons
    );
    assert_eq!(
        resumed.release, "lost",
        "{who}'s release after its loss ended {}",
        resumed.release
    );
}

/// Panics unless the register shows no reader beside a writer, and
/// refused or flagged nothing but accesses of `stale` from `from` on.
fn never_together(register: &RwRegister, stale: &str, from: usize) {
    register.exclusive().unwrap_or_else(|e| panic!("{e}"));
    for op in register.refused() {
        assert!(
            op.who == stale && op.seq >= from,
            "refused while its lock was live: {op:?} (a reader and a writer at once)"
        );
    }
}
