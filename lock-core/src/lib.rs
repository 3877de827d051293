//! # lock-core: one lock API over many stores
//!
//! Application code takes locks through a [`Locker`]; a store plugs in
//! behind it by implementing [`Backend`]. This crate holds everything that
//! is the same for every store: key rules, namespaces, deadlines, automatic
//! renewal, the lost signal, background release on drop, fencing tokens,
//! backoff policies, tracing — and the in-memory reference backend and the
//! conformance suite every backend passes.
//!
//! ```
//! use std::time::Duration;
//! use lock_core::{LockOptions, Locker};
//!
//! # async fn demo() -> Result<(), lock_core::LockError> {
//! let locks = Locker::memory("crate-docs")?;
//! let guard = locks.lock("reports/daily").await?;
//! // Send the token with every write; the resource rejects older tokens.
//! let token = guard.token();
//! tokio::select! {
//!     reason = guard.lost() => eprintln!("lock lost ({reason}); stop writing"),
//!     _ = tokio::time::sleep(Duration::from_millis(10)) => println!("work done with token {token}"),
//! }
//! guard.release().await?;
//!
//! let busy = locks.lock("reports/daily").await?;
//! let other = locks.lock_with("reports/daily", LockOptions::new().wait(Duration::from_millis(20))).await;
//! assert!(other.unwrap_err().is_timeout());
//! drop(busy); // released in the background
//! # Ok(()) }
//! # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
//! ```
//!
//! Guarantees every backend gives (checked by [`conformance`] when the
//! `conformance` feature is on): mutual exclusion per key and namespace,
//! strictly increasing fencing tokens, owner-checked release and renewal,
//! deadline-bounded waits, cancel-safe acquisition, and a lost signal that
//! fires once the lock is known gone.

mod backend;
mod backoff;
mod credentials;
mod due_queue;
mod early_renewal;
mod error;
mod guard;
mod key;
mod lock_url;
mod locker;
mod loss;
pub mod memory;
mod options;
mod owner;
mod renewal;
mod spawn;
mod token;
mod url_options;
mod wait;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use backend::{
    AcquireRequest, Acquired, Backend, Capabilities, FloorProbe, HeldLock, LockInfo, Renewal,
    WaitMode,
};
pub use backoff::{Backoff, Delays};
pub use credentials::{Secret, UrlCredentials};
pub use due_queue::DueQueue;
pub use error::{BoxError, LockError, Result};
pub use guard::LockGuard;
pub use key::{LockKey, LockName, Namespace, DEFAULT_NAMESPACE, MAX_KEY_LEN, MAX_NAMESPACE_LEN};
pub use lock_url::{mask_credentials, mask_password_options, HostPort, LockUrl};
pub use locker::Locker;
pub use loss::{loss_channel, LossReason, LossReporter, LossSignal};
pub use memory::MemoryBackend;
pub use options::{LockOptions, LockerOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_TTL, MIN_TTL};
pub use owner::OwnerId;
pub use renewal::clock_drift;
pub use spawn::{spawn_detached, CleanupOnDrop};
pub use token::FencingToken;
pub use url_options::{parse_duration, redacted, CommonOptions, UrlOptions};
pub use wait::{acquire_with_retries, Attempt, TryAcquire, WakeRegistry, WakeSubscription};

/// Re-exported so backend crates and the conformance macro name one version.
pub use async_trait::async_trait;
