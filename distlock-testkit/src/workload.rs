//! Workloads over many distinct lock names, for tests of what a store
//! keeps once they are released.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use lock_core::{LockError, Locker};

/// How [`touch_names`] used each name, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Touched {
    /// Names locked and released.
    pub locks: usize,
    /// Names read-locked and released.
    pub reads: usize,
    /// Names whose semaphore (of 2 permits) gave a permit, given back.
    pub permits: usize,
    /// Names campaigned for and resigned.
    pub elections: usize,
}

impl Touched {
    /// Every name touched.
    pub fn total(&self) -> usize {
        self.locks + self.reads + self.permits + self.elections
    }
}

/// What a name is used as.
#[derive(Clone, Copy)]
enum Use {
    Lock,
    Read,
    Permit,
    Election,
}

/// How name number `i` is used: one in twenty each as a read lock, a
/// permit and an election; the rest as plain locks.
fn use_of(i: usize) -> Use {
    match i % 20 {
        0 => Use::Read,
        1 => Use::Permit,
        2 => Use::Election,
        _ => Use::Lock,
    }
}

/// Takes and gives back `count` distinct names, `{prefix}{i}`, through
/// `lockers` (name `i` through locker `i % lockers.len()`), `concurrency`
/// at a time: mostly plain locks, and one name in twenty each as a read
/// lock, a permit of a 2-permit semaphore and an election. Every hold is
/// released explicitly; the first error stops the workload.
pub async fn touch_names(
    lockers: &[Locker],
    prefix: &str,
    count: usize,
    concurrency: usize,
) -> Result<Touched, LockError> {
    assert!(!lockers.is_empty() && concurrency > 0);
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (next, lockers, prefix) = (Arc::clone(&next), lockers.to_vec(), prefix.to_owned());
            tokio::spawn(async move {
                let mut touched = Touched::default();
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= count {
                        return Ok::<_, LockError>(touched);
                    }
                    let locker = &lockers[i % lockers.len()];
                    touch(locker, &format!("{prefix}{i}"), use_of(i), &mut touched).await?;
                }
            })
        })
        .collect();
    let mut total = Touched::default();
    for worker in workers {
        let touched = worker
            .await
            .map_err(|e| LockError::backend("a workload task failed", e))??;
        total.locks += touched.locks;
        total.reads += touched.reads;
        total.permits += touched.permits;
        total.elections += touched.elections;
    }
    Ok(total)
}

/// Uses `name` once as `kind` says and counts it.
async fn touch(
    locker: &Locker,
    name: &str,
    kind: Use,
    touched: &mut Touched,
) -> Result<(), LockError> {
    match kind {
        Use::Read => {
            locker.rwlock(name)?.read().await?.release().await?;
            touched.reads += 1;
        }
        Use::Permit => {
            locker
                .semaphore(name, 2)?
                .acquire()
                .await?
                .release()
                .await?;
            touched.permits += 1;
        }
        Use::Election => {
            locker
                .election(name)?
                .campaign("workload")
                .await?
                .resign()
                .await?;
            touched.elections += 1;
        }
        Use::Lock => {
            locker.lock(name).await?.release().await?;
            touched.locks += 1;
        }
    }
    Ok(())
}
