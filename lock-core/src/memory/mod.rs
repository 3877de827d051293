//! The in-memory backend (`mem://NAME`): the reference implementation the
//! conformance suite checks itself against.
//!
//! Stores live for the life of the process and are shared by name: every
//! `mem://jobs` locker of a process sees the same locks. Leases expire
//! after the ttl like on a network store, tokens come from a per-key
//! counter that is never reset, and releases wake waiters at once.
//! Nothing survives the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::backend::Capability::{Expiry, ForceRelease, NotifiedWakeups, PerLockExpiry};
use crate::backend::{
    acquire_with_retries, holder_stream, AcquireRequest, Acquired, Attempt, Backend, Backoff,
    Capabilities, Change, HeldLock, HolderSource, HolderStream, LossReporter, Renewal,
    Store as StorePlugin, TryAcquire, WakeRegistry, WakeSubscription,
};
use crate::error::LockError;
use crate::info::LockInfo;
use crate::key::LockName;
use crate::loss::LossReason;
use crate::owner::OwnerId;
use crate::token::FencingToken;
use crate::url::StoreUrl;

/// URL scheme of the memory store.
pub const MEMORY_SCHEME: &str = "mem";

/// The memory store's plug-in: `mem://NAME` (`mem://` is the store called
/// `default`); the URL takes a store name only.
#[derive(Clone, Copy, Debug)]
pub struct MemoryStore;

/// Settings of a `mem://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryConfig {
    /// The name the store is shared under in this process.
    pub name: String,
}

impl StorePlugin for MemoryStore {
    const NAME: &'static str = "memory";
    const SCHEMES: &'static [&'static str] = &[MEMORY_SCHEME];
    type Config = MemoryConfig;

    fn config(url: &mut StoreUrl) -> Result<MemoryConfig, LockError> {
        let url = url.url();
        if !url.username().is_empty() || url.password().is_some() || url.port().is_some() {
            return Err(LockError::invalid_config(
                "mem:// URLs take only a store name: mem://NAME",
            ));
        }
        if !matches!(url.path(), "" | "/") {
            return Err(LockError::invalid_config(format!(
                "mem:// URLs take no path, got `{}`",
                url.path()
            )));
        }
        Ok(MemoryConfig {
            name: url.host_str().unwrap_or("default").to_owned(),
        })
    }

    async fn open(config: MemoryConfig) -> Result<Arc<dyn Backend>, LockError> {
        Ok(Arc::new(MemoryBackend::named(&config.name)))
    }
}

/// A lock store in this process's memory. See the module docs.
#[derive(Clone, Debug)]
pub struct MemoryBackend {
    store: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    name: String,
    state: Mutex<State>,
    /// Wakes waiters when a lock is released.
    wakes: WakeRegistry,
    /// Wakes watchers when a lock's holder or value changes.
    changes: WakeRegistry,
}

#[derive(Debug, Default)]
struct State {
    locks: HashMap<LockName, Entry>,
    counters: HashMap<LockName, u64>,
}

#[derive(Debug)]
struct Entry {
    owner: OwnerId,
    token: FencingToken,
    value: String,
    expires_at: Instant,
    reporter: LossReporter,
}

impl Entry {
    fn live(&self, now: Instant) -> bool {
        now < self.expires_at
    }

    fn info(&self, now: Instant) -> LockInfo {
        LockInfo::new(
            self.owner.as_str(),
            self.token,
            Some(self.expires_at.saturating_duration_since(now)),
        )
        .with_value(self.value.as_str())
    }
}

impl MemoryBackend {
    /// The process-wide store called `name`, created on first use.
    pub fn named(name: &str) -> Self {
        static STORES: OnceLock<Mutex<HashMap<String, Weak<Shared>>>> = OnceLock::new();
        let mut stores = STORES
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(store) = stores.get(name).and_then(Weak::upgrade) {
            return Self { store };
        }
        let store = Arc::new(Shared {
            name: name.to_owned(),
            ..Shared::default()
        });
        stores.retain(|_, weak| weak.strong_count() > 0);
        stores.insert(name.to_owned(), Arc::downgrade(&store));
        Self { store }
    }
}

impl MemoryBackend {
    /// The name this store is shared under.
    pub fn store_name(&self) -> &str {
        &self.store.name
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake_key(name: &LockName) -> String {
        name.to_string()
    }

    /// The live holder of `name` and when its lease ends.
    fn holder(&self, name: &LockName) -> Option<(LockInfo, Instant)> {
        let now = Instant::now();
        self.state()
            .locks
            .get(name)
            .filter(|e| e.live(now))
            .map(|e| (e.info(now), e.expires_at))
    }

    /// Tells the watchers of `name` that its holder or value changed.
    fn changed(&self, name: &LockName) {
        self.changes.wake(&Shared::wake_key(name));
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn name(&self) -> &'static str {
        MEMORY_SCHEME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::of(&[Expiry, PerLockExpiry, ForceRelease, NotifiedWakeups])
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Option<Acquired>, LockError> {
        acquire_with_retries(self, request).await
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<LockInfo>, LockError> {
        Ok(self.store.holder(name).map(|(info, _)| info))
    }

    fn watch(&self, name: &LockName) -> HolderStream {
        holder_stream(MemoryWatch {
            changes: self.store.changes.subscribe(&Shared::wake_key(name)),
            store: Arc::clone(&self.store),
            name: name.clone(),
            expires_at: None,
        })
    }

    async fn force_release(&self, name: &LockName) -> Result<bool, LockError> {
        let removed = self.store.state().locks.remove(name);
        let Some(entry) = removed else {
            return Ok(false);
        };
        entry.reporter.report(LossReason::TakenAway);
        self.store.wakes.wake(&Shared::wake_key(name));
        self.store.changed(name);
        Ok(entry.live(Instant::now()))
    }
}

#[async_trait]
impl TryAcquire for MemoryBackend {
    async fn watch_releases(&self, name: &LockName) -> Result<WakeSubscription, LockError> {
        Ok(self.store.wakes.subscribe(&Shared::wake_key(name)))
    }

    async fn try_acquire_once(&self, request: &AcquireRequest) -> Result<Attempt, LockError> {
        let now = Instant::now();
        let mut state = self.store.state();
        if let Some(holder) = state.locks.get(&request.name).filter(|e| e.live(now)) {
            return Ok(Attempt::Held {
                retry_after: Some(holder.expires_at - now),
            });
        }
        let counter = state.counters.entry(request.name.clone()).or_insert(0);
        *counter += 1;
        let token = FencingToken::new(*counter);
        let entry = Entry {
            owner: request.owner.clone(),
            token,
            value: request.value.clone(),
            expires_at: now + request.ttl,
            reporter: request.loss.clone(),
        };
        if let Some(expired) = state.locks.insert(request.name.clone(), entry) {
            expired.reporter.report(LossReason::ValidityExpired);
        }
        drop(state);
        self.store.changed(&request.name);
        Ok(Attempt::Acquired(Acquired {
            token,
            requested_at: now,
            renewal: Renewal::Lease,
            held: Box::new(MemoryHeld {
                store: Arc::clone(&self.store),
                name: request.name.clone(),
                owner: request.owner.clone(),
            }),
        }))
    }

    fn poll_policy(&self) -> Backoff {
        // Releases always wake waiters and expiry is covered by the
        // holder's remaining lease: no polling needed.
        Backoff::stop()
    }
}

/// One lock held in a memory store.
#[derive(Debug)]
struct MemoryHeld {
    store: Arc<Shared>,
    name: LockName,
    owner: OwnerId,
}

impl MemoryHeld {
    fn lost(&self) -> LockError {
        LockError::lost(self.name.key().as_str(), LossReason::RenewalRefused)
    }
}

impl MemoryHeld {
    /// Owner-checked removal; true if the entry was ours.
    fn remove_if_ours(&self) -> Option<bool> {
        let now = Instant::now();
        let mut state = self.store.state();
        let ours = state.locks.get(&self.name)?.owner == self.owner;
        if !ours {
            return None;
        }
        let was_live = state.locks.remove(&self.name).is_some_and(|e| e.live(now));
        drop(state);
        self.store.wakes.wake(&Shared::wake_key(&self.name));
        self.store.changed(&self.name);
        Some(was_live)
    }
}

impl Drop for MemoryHeld {
    /// Releases synchronously, so a guard dropped outside any runtime still
    /// frees its lock. Owner-checked: never touches a later holder's lock.
    fn drop(&mut self) {
        self.remove_if_ours();
    }
}

#[async_trait]
impl HeldLock for MemoryHeld {
    async fn renew(&self, ttl: Duration) -> Result<(), LockError> {
        let now = Instant::now();
        let mut state = self.store.state();
        match state.locks.get_mut(&self.name) {
            Some(entry) if entry.owner == self.owner && entry.live(now) => {
                entry.expires_at = now + ttl;
                Ok(())
            }
            _ => Err(self.lost()),
        }
    }

    async fn release(&self) -> Result<(), LockError> {
        match self.remove_if_ours() {
            Some(true) => Ok(()),
            Some(false) | None => Err(self.lost()),
        }
    }

    async fn set_value(&self, value: &str) -> Result<(), LockError> {
        let now = Instant::now();
        let mut state = self.store.state();
        match state.locks.get_mut(&self.name) {
            Some(entry) if entry.owner == self.owner && entry.live(now) => {
                entry.value = value.to_owned();
                drop(state);
                self.store.changed(&self.name);
                Ok(())
            }
            _ => Err(self.lost()),
        }
    }
}

/// A watch of one lock in a memory store: woken by every change, and at the
/// holder's expiry (which nothing announces).
struct MemoryWatch {
    store: Arc<Shared>,
    name: LockName,
    changes: WakeSubscription,
    expires_at: Option<Instant>,
}

#[async_trait]
impl HolderSource for MemoryWatch {
    async fn read(&mut self) -> Result<Option<LockInfo>, LockError> {
        let holder = self.store.holder(&self.name);
        self.expires_at = holder.as_ref().map(|(_, expires_at)| *expires_at);
        Ok(holder.map(|(info, _)| info))
    }

    async fn next_change(&mut self) -> Result<Change, LockError> {
        match self.expires_at {
            Some(expires_at) => {
                tokio::select! {
                    _ = self.changes.woken() => {}
                    _ = tokio::time::sleep_until(expires_at.into()) => {}
                }
            }
            None => self.changes.woken().await,
        }
        Ok(Change::Reread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_are_shared_by_name() {
        let a = MemoryBackend::named("memory-tests-shared");
        let b = MemoryBackend::named("memory-tests-shared");
        let c = MemoryBackend::named("memory-tests-other");
        assert!(Arc::ptr_eq(&a.store, &b.store));
        assert!(!Arc::ptr_eq(&a.store, &c.store));
        assert_eq!(a.store.name, "memory-tests-shared");
    }

    #[test]
    fn url_forms() {
        let parse = |u: &str| crate::url::parse::<MemoryStore>(u).map(|p| p.config.name);
        assert_eq!(parse("mem://").unwrap(), "default");
        assert_eq!(parse("mem://jobs").unwrap(), "jobs");
        assert!(parse("mem://jobs/extra").is_err());
        assert!(parse("mem://u:p@jobs").is_err());
    }
}
