//! The runner against real servers: it must catch what an unsafe
//! configuration does, and find nothing where the docs promise safety.

use std::time::Duration;

use distlock_torture::{run, Fault, Plan, Row, Topology};

fn plan(topology: Topology, fault: Fault) -> Plan {
    Plan {
        topology,
        faults: vec![fault],
        duration: Duration::from_secs(8),
        tasks: 2,
        processes: 2,
        keys: 1,
        ttl: Duration::from_secs(1),
        program: env!("CARGO_BIN_EXE_distlock-torture").into(),
    }
}

/// Runs [`plan`] on `topology` with `fault`, and checks the fault was
/// injected at least once.
async fn run_injecting(topology: Topology, fault: Fault) -> Row {
    let row = run(&plan(topology, fault)).await.unwrap();
    assert!(row.injected[fault.name()] > 0, "{row:?}");
    row
}

/// Redis without persistence, killed and restarted under clients, counts
/// tokens from 1 again: the run must show it (token regressions), and the
/// row must say the docs do not promise safety there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_without_persistence_is_caught() {
    let row = run_injecting(Topology::RedisSingle, Fault::ServerKill).await;
    assert!(row.figures.token_regressions > 0, "{row:?}");
    assert!(!row.safe && !row.documented_safe, "{row:?}");
}

/// The same fault with `appendfsync always`: tokens keep rising, no two
/// hold a lock or lead at once, no semaphore has more holders than
/// permits, nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_with_appendfsync_always_survives_the_same() {
    let row = run_injecting(Topology::RedisAof, Fault::ServerKill).await;
    // Locks, leaderships and permits were all taken, and judged.
    let f = row.figures;
    assert!(f.acquisitions > f.leaderships + f.permits, "{row:?}");
    assert!(f.leaderships > 0 && f.permits > 0, "{row:?}");
    assert!(row.safe && row.documented_safe, "{row:?}");
}

/// A holder frozen past its lease is told it lost the lock before it can
/// claim it again; the lock moves on meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_holder_wakes_up_knowing_it_lost() {
    let row = run_injecting(Topology::RedisAof, Fault::HolderPause).await;
    // Every freeze counted as injected hit a process that held a key (by
    // the register's timeline) for two ttls: woken, its guard says the
    // hold is gone, and the client reports the loss instead of its next
    // claim. Nothing else in this run loses a lock, so no loss reported
    // means a frozen holder woke up believing it still held.
    assert!(
        row.figures.losses > 0,
        "no frozen holder reported a loss: {row:?}"
    );
    assert_eq!(row.figures.overlaps, 0, "{row:?}");
    assert!(row.safe, "{row:?}");
}
