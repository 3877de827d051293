//! What every client does: take a key (lock it, lead its election, take
//! one of its permits, or read or write-lock it), present its token, write
//! with it (a reader: check its read) a few times while its guard says
//! the hold is ours, release; again.

use std::time::Duration;

use distlock::{LockOptions, Locker};
use tokio::sync::watch;

use crate::clock::now_ns;
use crate::link::RegisterLink;
use crate::primitive::Hold;
use crate::register::{Op, Verdict};

/// The shape of the load.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The keys clients pick from at random (their names say what they
    /// are: see [`primitive`](crate::primitive)).
    pub keys: Vec<String>,
    /// The lease of every lock.
    pub ttl: Duration,
}

impl Workload {
    /// The longest a client waits for a lock before it gives up and
    /// tries another key.
    fn wait(&self) -> Duration {
        self.ttl * 3
    }

    /// How long one holding lasts and in how many writes: half of them
    /// short (a tenth to half the ttl), half past the ttl (so that leases
    /// are renewed, and a fault often lands while a lock is held).
    fn holding(&self) -> (Duration, u32) {
        if fastrand::bool() {
            (self.ttl / 10 * fastrand::u32(1..=5), fastrand::u32(1..=3))
        } else {
            (self.ttl / 10 * fastrand::u32(11..=20), fastrand::u32(4..=8))
        }
    }
}

/// Runs one client until `stop` turns true; a holding in progress is
/// finished and released first, a wait is abandoned.
pub async fn run(
    locker: &Locker,
    register: &dyn RegisterLink,
    workload: &Workload,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    while !*stop.borrow() {
        let key = &workload.keys[fastrand::usize(..workload.keys.len())];
        register.send(Op::Waiting { key: key.clone() }).await?;
        let options = LockOptions::default().wait(workload.wait());
        let taken = tokio::select! {
            taken = Hold::take(locker, key, "torture-client", options) => taken,
            _ = stopped(&mut stop) => {
                register.send(Op::GaveUp { key: key.clone() }).await?;
                break;
            }
        };
        match taken {
            Ok(taken) => {
                hold(&taken, key, register, workload).await?;
                // A hold lost meanwhile says so here; already counted.
                let _ = taken.release().await;
            }
            Err(_) => {
                register.send(Op::GaveUp { key: key.clone() }).await?;
                // A store that fails fast (cut off, restarting) is not
                // hammered.
                tokio::time::sleep(workload.ttl / 20).await;
            }
        }
    }
    Ok(())
}

/// One holding: present the token, write (a reader: read), release.
async fn hold(
    guard: &Hold,
    key: &str,
    register: &dyn RegisterLink,
    workload: &Workload,
) -> Result<(), String> {
    let token = guard.token();
    let reads = guard.reads();
    let (length, writes) = workload.holding();
    let begin = |claim| {
        if reads {
            Op::BeginRead {
                key: key.into(),
                token,
                claim,
            }
        } else {
            Op::Begin {
                key: key.into(),
                token,
                claim,
            }
        }
    };
    let Some(mut verdict) = claim_while_held(guard, key, register, begin).await? else {
        return Ok(());
    };
    for _ in 0..writes {
        if verdict == Verdict::Stale {
            break;
        }
        tokio::time::sleep(length / writes).await;
        let write = |claim| {
            if reads {
                Op::Read {
                    key: key.into(),
                    token,
                    claim,
                }
            } else {
                Op::Write {
                    key: key.into(),
                    token,
                    claim,
                }
            }
        };
        match claim_while_held(guard, key, register, write).await? {
            Some(next) => verdict = next,
            None => return Ok(()),
        }
    }
    register.send(Op::End { key: key.into() }).await?;
    Ok(())
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// Stamps the time of a claim, then, if `guard` still says the hold is
/// ours, sends the register `claim(that time)` and returns its verdict;
/// otherwise it sends [`Op::Lost`] and returns `None`.
async fn claim_while_held(
    guard: &Hold,
    key: &str,
    register: &dyn RegisterLink,
    claim: impl FnOnce(u64) -> Op,
) -> Result<Option<Verdict>, String> {
    let at = now_ns();
    if !guard.is_held() {
        register.send(Op::Lost { key: key.into() }).await?;
        return Ok(None);
    }
    register.send(claim(at)).await.map(Some)
}
