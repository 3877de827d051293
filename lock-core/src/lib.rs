//! # lock-core: one lock API over many stores
//!
//! Application code takes locks through a [`Locker`]; a store plugs in
//! behind it by implementing [`backend::Backend`]. This crate holds
//! everything that is the same for every store: key rules, namespaces,
//! deadlines, automatic renewal, the lost signal, background release on
//! drop, fencing tokens, backoff policies, tracing — and the in-memory
//! reference store and the conformance suite every store passes.
//!
//! The crate root is the user's API. What a store implements, and the
//! machinery it may reuse, is in [`backend`]; reading lock URLs is in
//! [`url`]; the reference store is [`memory`].
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
//! Guarantees every backend gives (checked by the `conformance` module when the
//! `conformance` feature is on): mutual exclusion per key and namespace,
//! strictly increasing fencing tokens, owner-checked release and renewal,
//! deadline-bounded waits, cancel-safe acquisition, and a lost signal that
//! fires once the lock is known gone.

//!
//! ## Cargo features
#![doc = document_features::document_features!()]
// On docs.rs (nightly rustdoc), items behind a cargo feature are marked
// with it.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod backend;
mod election;
mod error;
mod guard;
mod info;
mod keeper;
mod key;
mod limits;
mod locker;
mod locker_core;
mod loss;
mod loss_reason;
pub mod memory;
pub mod open;
mod options;
mod owner;
mod renewal;
mod rwlock;
mod semaphore;
mod taking;
pub mod telemetry;
mod token;
pub mod url;
mod watch;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use election::{Election, LeaderInfo, LeaderWatch, Leadership};
pub use error::{LockError, Result};
pub use guard::LockGuard;
pub use info::{HoldKind, LockInfo};
pub use key::{LockKey, LockName, Namespace, DEFAULT_NAMESPACE, MAX_KEY_LEN, MAX_NAMESPACE_LEN};
pub use limits::{MAX_SEMAPHORE_LIMIT, MAX_VALUE_LEN, MIN_TTL};
pub use locker::Locker;
pub use loss::LossSignal;
pub use loss_reason::LossReason;
pub use options::{LockOptions, LockerOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_TTL};
pub use owner::OwnerId;
pub use rwlock::RwLock;
pub use semaphore::Semaphore;
pub use token::FencingToken;
pub use watch::HolderWatch;
