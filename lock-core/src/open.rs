//! From a lock URL to a store: [`parse`] reads the URL with a store's
//! [`Store`], and [`open_store`] opens the store and builds the [`Locker`]
//! over it.
//!
//! This module sits above both the plug-in trait (`backend`) and the URL
//! readers (`url`), which know nothing of each other's callers; the
//! public paths are `lock_core::open::parse` and
//! `lock_core::open::open_store`.

use crate::backend::Store;
use crate::error::LockError;
use crate::locker::Locker;
use crate::url::{Parsed, StoreUrl};

/// Reads `text` as a URL of store `S`: the scheme must be one of
/// [`S::SCHEMES`](Store::SCHEMES); the common options are taken; then
/// [`S::config`](Store::config) reads the rest, and any option left over is
/// an error naming it and listing the known ones.
///
/// Every error is [`LockError::InvalidConfig`] and shows the URL with its
/// credentials masked.
pub fn parse<S: Store>(text: &str) -> Result<Parsed<S::Config>, LockError> {
    let mut url = StoreUrl::read(text, S::NAME, S::SCHEMES)?;
    let config = S::config(&mut url)?;
    let locker = url.finish()?;
    Ok(Parsed { config, locker })
}

/// Opens a [`Locker`] on the store `url` names, read through `S`: the
/// common options become the locker's settings.
pub async fn open_store<S: Store>(url: &str) -> Result<Locker, LockError> {
    let parsed = parse::<S>(url)?;
    let backend = S::open(parsed.config).await?;
    Ok(Locker::new(backend, parsed.locker))
}
