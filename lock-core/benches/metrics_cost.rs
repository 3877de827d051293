//! What recording metrics costs an uncontended lock+release on the memory
//! store: with no recorder installed (the `metrics` facade's no-op) and
//! with a Prometheus recorder, alternating in blocks on one current-thread
//! runtime so that both see the same machine.
//!
//! ```sh
//! cargo bench -p lock-core --bench metrics_cost                        # feature on
//! cargo bench -p lock-core --bench metrics_cost --no-default-features  # compiled out
//! ```

use std::time::{Duration, Instant};

use lock_core::Locker;

const BLOCK: usize = 2_000;
const ROUNDS: usize = 10;

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * p) as usize]
}

fn block(runtime: &tokio::runtime::Runtime, locks: &Locker, out: &mut Vec<Duration>) {
    runtime.block_on(async {
        for _ in 0..BLOCK {
            let started = Instant::now();
            let guard = locks.lock("cost").await.expect("lock");
            guard.release().await.expect("release");
            out.push(started.elapsed());
        }
    });
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let locks = Locker::memory("metrics-cost").expect("locker");
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let (mut bare, mut recorded) = (Vec::new(), Vec::new());
    // Warm-up, unrecorded.
    block(&runtime, &locks, &mut Vec::new());
    for _ in 0..ROUNDS {
        block(&runtime, &locks, &mut bare);
        metrics::with_local_recorder(&recorder, || block(&runtime, &locks, &mut recorded));
    }
    let rendered = recorder.handle().render();
    assert_eq!(
        rendered.contains(lock_core::telemetry::ACQUISITIONS_TOTAL),
        cfg!(feature = "metrics"),
        "the recorder saw the locks exactly when the feature is on"
    );
    println!(
        "uncontended lock+release on mem://, {} each, current-thread runtime, feature `metrics` {}",
        bare.len(),
        if cfg!(feature = "metrics") {
            "on"
        } else {
            "off"
        }
    );
    for (name, samples) in [
        ("no recorder", &mut bare),
        ("prometheus recorder", &mut recorded),
    ] {
        let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
        println!(
            "  {name:<20} p50 {:>8.2?}  p99 {:>8.2?}  mean {:>8.2?}",
            percentile(samples, 0.5),
            percentile(samples, 0.99),
            mean
        );
    }
    let ratio =
        percentile(&mut recorded, 0.5).as_secs_f64() / percentile(&mut bare, 0.5).as_secs_f64();
    println!("  recorder/none p50    {ratio:.2}x");
}
