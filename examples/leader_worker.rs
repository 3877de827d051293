//! A worker that works only while it leads, and stops the moment its
//! leadership is lost.
//!
//! Two workers campaign in one election. The leader works in a loop that
//! also waits on `lost()`: whichever comes first, the next work item or
//! the loss, decides, so no work starts after the loss is known. Each work
//! item carries the term (the fencing token), which a store of results
//! would check. After three items the leader steps down with `resign()`,
//! and the other worker, waiting its turn, leads at once.
//!
//! Run it with `cargo run --example leader_worker`; set `DISTLOCK_URL` to
//! elect across machines (start it on several, each leads in turn).

use std::time::Duration;

use distlock::{Election, LossReason};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Each worker its own locker, as two processes would have.
    let mut workers = Vec::new();
    for name in ["worker-a", "worker-b"] {
        let locks = distlock_examples::locker("leader-example").await?;
        let election = locks.election("report-scheduler")?;
        workers.push(tokio::spawn(work_while_leading(election, name)));
    }
    let mut terms = Vec::new();
    for worker in workers {
        terms.push(worker.await??);
    }
    terms.sort();
    println!("terms led: {terms:?}");
    if terms[0] == terms[1] {
        return Err("two leaders shared a term".into());
    }
    Ok(())
}

/// Campaigns, then works three items while leading; returns the term.
async fn work_while_leading(
    election: Election,
    name: &'static str,
) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
    let leader = election.campaign(name).await?;
    let term = leader.term();
    println!("{name}: leading, term {term}");
    for item in 1..=3 {
        tokio::select! {
            reason = leader.lost() => {
                println!("{name}: lost the leadership ({reason}); stopping");
                return Err(lost(reason).into());
            }
            () = tokio::time::sleep(Duration::from_millis(200)) => {
                println!("{name}: work item {item} done as term {term}");
            }
        }
    }
    println!("{name}: stepping down");
    leader.resign().await?;
    Ok(term.get())
}

fn lost(reason: LossReason) -> String {
    format!("leadership lost: {reason}")
}
