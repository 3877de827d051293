//! How the suite opens lockers.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::LockError;
use crate::key::Namespace;
use crate::locker::Locker;
use crate::options::LockerOptions;

/// What a case asks of the lockers it opens.
#[derive(Clone, Debug)]
pub struct CaseSettings {
    /// A namespace unique to this case run.
    pub namespace: Namespace,
    /// The lease length.
    pub ttl: Duration,
}

impl CaseSettings {
    /// Locker settings with this namespace and ttl, waiting forever by default.
    pub fn locker_options(&self) -> LockerOptions {
        LockerOptions {
            ttl: self.ttl,
            namespace: self.namespace.clone(),
            wait: None,
        }
    }
}

/// Opens fresh lockers on the store under test.
#[async_trait]
pub trait LockerFactory: Send + Sync {
    /// Opens a new locker — its own connection or session — with `settings`.
    async fn open(&self, settings: &CaseSettings) -> Result<Locker, LockError>;

    /// Takes the lock on `key` (in `locker`'s namespace) away from its
    /// holder from outside, as an operator or a store failure would: for
    /// example by deleting the key, node or file, or revoking a lease.
    /// The default uses [`Locker::force_release`] where the backend
    /// supports it; `None` means this factory cannot (cases needing it
    /// report themselves not applicable).
    async fn take_away(&self, locker: &Locker, key: &str) -> Option<Result<(), LockError>> {
        if !locker.capabilities().force_release {
            return None;
        }
        Some(match locker.force_release(key).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(LockError::invalid_config(format!(
                "force_release found no lock on `{key}`"
            ))),
            Err(error) => Err(error),
        })
    }

    /// Opens a locker whose connection to the store can be cut and
    /// restored, for the unavailability case; `None` if this factory cannot
    /// (the case then reports itself not applicable).
    async fn open_with_outage(
        &self,
        settings: &CaseSettings,
    ) -> Option<Result<(Locker, Box<dyn Outage>), LockError>> {
        let _ = settings;
        None
    }
}

/// Makes a store unreachable for the lockers of one
/// [`LockerFactory::open_with_outage`] call, and reachable again.
#[async_trait]
pub trait Outage: Send + Sync {
    /// Cut the connection: requests fail or go unanswered.
    async fn begin(&self);
    /// Restore it.
    async fn end(&self);
}

type OpenFuture = Pin<Box<dyn Future<Output = Result<Locker, LockError>> + Send>>;

/// A [`LockerFactory`] from a closure.
pub struct FnFactory {
    open: Box<dyn Fn(CaseSettings) -> OpenFuture + Send + Sync>,
}

impl FnFactory {
    /// Wraps `open`, called once per locker.
    pub fn new<F, Fut>(open: F) -> Self
    where
        F: Fn(CaseSettings) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Locker, LockError>> + Send + 'static,
    {
        Self {
            open: Box::new(move |settings| Box::pin(open(settings))),
        }
    }
}

#[async_trait]
impl LockerFactory for FnFactory {
    async fn open(&self, settings: &CaseSettings) -> Result<Locker, LockError> {
        (self.open)(settings.clone()).await
    }
}

impl fmt::Debug for FnFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnFactory")
    }
}
