//! How a store reads its lock URLs, for the store's own config tests: the
//! URL goes through [`lock_core::open::parse`], the path `connect` takes.
//!
//! ```
//! use distlock_testkit::store_config::{url_config, url_refused};
//! use lock_core::memory::MemoryStore;
//!
//! assert_eq!(url_config::<MemoryStore>("mem://jobs?ttl=2s").name, "jobs");
//! let reason = url_refused::<MemoryStore>("mem://jobs?colour=red");
//! assert!(reason.contains("unknown option `colour`"), "{reason}");
//! ```

use std::fmt::Debug;

use lock_core::backend::Store;
use lock_core::LockError;

/// What `url` configures in store `S`, read as `connect` reads it.
///
/// # Panics
///
/// If `url` is refused, with the error and the URL.
pub fn url_config<S: Store>(url: &str) -> S::Config {
    lock_core::open::parse::<S>(url)
        .unwrap_or_else(|error| panic!("{url}: refused: {error}"))
        .config
}

/// Why store `S` refuses `url`: the reason of the
/// [`InvalidConfig`](LockError::InvalidConfig) error.
///
/// # Panics
///
/// If `url` is accepted or refused with another kind of error, naming the
/// URL.
pub fn url_refused<S: Store>(url: &str) -> String {
    invalid_config(url, lock_core::open::parse::<S>(url))
}

/// The reason of the [`InvalidConfig`](LockError::InvalidConfig) error in
/// `result`.
///
/// # Panics
///
/// If `result` holds anything else, naming `what` was tried.
pub fn invalid_config<T: Debug>(what: &str, result: Result<T, LockError>) -> String {
    match result {
        Err(LockError::InvalidConfig { reason }) => reason,
        other => panic!("{what}: expected InvalidConfig, got {other:?}"),
    }
}
