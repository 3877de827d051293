//! An HTTP handler that answers 409 Conflict while the resource it works
//! on is busy, instead of queueing requests behind the lock: `try_lock`
//! makes one attempt and returns `None` when someone else holds it.
//!
//! Run it with `cargo run --example http_busy`. It serves
//! `POST /reports/{id}` on a free port of 127.0.0.1, sends itself two
//! overlapping requests for the same report, prints their statuses (one
//! 200, one 409) and exits. With `DISTLOCK_URL` set to a shared store,
//! every instance of the service answers 409 for a report another
//! instance is generating.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use distlock::Locker;

/// Generates report `id`, or answers 409 if another request is at it.
async fn generate(State(locks): State<Locker>, Path(id): Path<String>) -> (StatusCode, String) {
    let key = format!("reports/{id}");
    match locks.try_lock(&key).await {
        Ok(Some(guard)) => {
            // The work, with guard.token() on every write it makes.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let token = guard.token();
            match guard.release().await {
                Ok(()) => (
                    StatusCode::OK,
                    format!("report {id} generated (token {token})\n"),
                ),
                Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")),
            }
        }
        Ok(None) => (
            StatusCode::CONFLICT,
            format!("report {id} is being generated\n"),
        ),
        // The key is checked by the store; a bad one is the caller's fault.
        Err(error @ distlock::LockError::InvalidKey { .. }) => {
            (StatusCode::BAD_REQUEST, format!("{error}\n"))
        }
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n")),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let locks = distlock_examples::locker("http-example").await?;
    let mut holder = locks.watch("reports/monthly")?;
    let app = Router::new()
        .route("/reports/{id}", post(generate))
        .with_state(locks);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    println!("serving on http://{addr}");

    let first = tokio::spawn(distlock_examples::http(addr, "POST", "/reports/monthly"));
    // Send the second request once the first one holds the report's lock.
    while holder.changed().await.is_none() {}
    let (second_status, second_body) =
        distlock_examples::http(addr, "POST", "/reports/monthly").await?;
    let (first_status, first_body) = first.await??;
    print!("first request:  {first_status} {first_body}");
    print!("second request: {second_status} {second_body}");
    if (first_status, second_status) != (200, 409) {
        return Err("expected 200 for the first request and 409 for the second".into());
    }
    Ok(())
}
