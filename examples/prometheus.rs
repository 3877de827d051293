//! Exporting distlock's metrics to Prometheus: install a recorder of
//! `metrics-exporter-prometheus` once at start-up and serve what it renders
//! on `/metrics`; every lock the process takes is then counted, timed and
//! labelled by store, namespace and kind (never by key). The names are in
//! `distlock::telemetry`.
//!
//! Run it with `cargo run --example prometheus`. It takes a few locks
//! (one of them contended until its wait runs out), serves `/metrics` on a
//! free port of 127.0.0.1, fetches it once, prints the distlock series and
//! exits.

use std::time::Duration;

use axum::routing::get;
use axum::Router;
use distlock::LockOptions;
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Once, before any lock is taken.
    let metrics = PrometheusBuilder::new().install_recorder()?;

    let locks = distlock_examples::locker("prometheus-example").await?;
    for _ in 0..3 {
        locks.lock("nightly-report").await?.release().await?;
    }
    let held = locks.lock("nightly-report").await?;
    let busy = locks
        .lock_with(
            "nightly-report",
            LockOptions::new().wait(Duration::from_millis(100)),
        )
        .await;
    assert!(busy.is_err_and(|error| error.is_timeout()));
    held.release().await?;

    let app = Router::new().route("/metrics", get(move || async move { metrics.render() }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });

    let (status, body) = distlock_examples::http(addr, "GET", "/metrics").await?;
    println!("GET http://{addr}/metrics -> {status}");
    for line in body.lines().filter(|line| line.starts_with("distlock_")) {
        println!("{line}");
    }
    let acquisitions = body
        .lines()
        .find(|line| line.starts_with("distlock_acquisitions_total{"))
        .ok_or("no acquisitions counted")?;
    if !acquisitions.ends_with(" 4") {
        return Err(format!("expected 4 acquisitions: {acquisitions}").into());
    }
    Ok(())
}
