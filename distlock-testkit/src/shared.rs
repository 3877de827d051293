//! One server shared by all tests of a test binary.
//!
//! Each `#[tokio::test]` has its own runtime, so a server cannot live in
//! one test. [`shared_server`] starts it once, on first use, and keeps it
//! in a static for the rest of the process; the exit hook (see
//! `cleanup.rs`) and the parent-death signal kill it at the end.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use tokio::sync::OnceCell;

use crate::server::Server;
use crate::spec::ServerSpec;

/// The outcome of starting one shared server, kept for all later callers.
type Slot = OnceCell<Result<&'static Server, String>>;

/// Returns the server registered under `key`, starting it from `spec()`
/// on the first call.
///
/// Concurrent first callers (tests in parallel, each on its own runtime)
/// wait for one start. A failed start is remembered: every test using the
/// key fails with the same message instead of waiting out the readiness
/// timeout again. If the starting test is cancelled midway, the next
/// caller starts it.
///
/// Tests sharing a server must not stop, pause or restart it, and must
/// isolate their keys (e.g. a unique namespace each); fault tests need a
/// server of their own.
pub async fn shared_server<F>(key: &'static str, spec: F) -> Result<&'static Server, String>
where
    F: FnOnce() -> Result<ServerSpec, String>,
{
    slot(key)
        .get_or_init(|| async {
            let server = spec()?.start().await?;
            // Leaked on purpose: it lives as long as the process.
            let server: &'static Server = Box::leak(Box::new(server));
            Ok(server)
        })
        .await
        .clone()
}

/// The slot for `key`, created on first use. Slots are leaked so the
/// returned reference is `'static` and the map lock is not held while a
/// server starts.
fn slot(key: &'static str) -> &'static Slot {
    static SLOTS: OnceLock<Mutex<HashMap<&'static str, &'static Slot>>> = OnceLock::new();
    let mut slots = SLOTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    slots
        .entry(key)
        .or_insert_with(|| Box::leak(Box::new(Slot::new())))
}
