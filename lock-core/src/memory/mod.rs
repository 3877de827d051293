//! The in-memory backend (`mem://NAME`): the reference implementation the
//! conformance suite checks itself against.
//!
//! Stores live for the life of the process and are shared by name: every
//! `mem://jobs` locker of a process sees the same locks. Leases expire
//! after the ttl like on a network store, tokens come from a per-object
//! counter that is never reset (a name's lock, shared by its readers and
//! writers, and its semaphore count apart), and waiters are served in the
//! order they asked: a release grants the queue's front for as long as it
//! fits beside the holders and wakes exactly the waiters it let in.
//! Watches get every change of a lock's holder or value, a lease running
//! out included: the table queues each on every watcher of the lock as
//! it makes it (`watch_every_change`). Nothing survives the process.

mod object;
mod table;
mod watch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::backend::Capability::PerLockExpiry;
use crate::backend::Capability::WatchEveryChange;
use crate::backend::{
    holder_stream, AcquireRequest, Acquired, Backend, Capabilities, HeldLock, HolderStream,
    Primitive, Renewal, Store as StorePlugin,
};
use crate::error::LockError;
use crate::info::LockInfo;
use crate::key::{LockName, Namespace};
use crate::loss_reason::LossReason;
use crate::owner::OwnerId;
use crate::token::FencingToken;
use crate::url::StoreUrl;
use object::ObjectId;
use table::{Admission, Table};
use watch::MemoryWatch;

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
    /// The locks, their waiters and their watchers.
    table: Mutex<Table>,
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

    /// The name this store is shared under.
    pub fn store_name(&self) -> &str {
        &self.store.name
    }

    fn acquired(&self, request: &AcquireRequest, token: FencingToken, at: Instant) -> Acquired {
        Acquired {
            token,
            requested_at: at,
            renewal: Renewal::Lease,
            held: Box::new(MemoryHeld {
                store: Arc::clone(&self.store),
                id: ObjectId::of(&request.name, request.kind),
                owner: request.owner.clone(),
            }),
        }
    }
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the waiters `woken` (granted in the table). Watchers need no
    /// wake-up: the table queued each change on them as it made it.
    fn woke(&self, woken: Vec<Arc<Notify>>) {
        for wake in woken {
            wake.notify_one();
        }
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn name(&self) -> &'static str {
        MEMORY_SCHEME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::QUEUEING_STORE.with(&[PerLockExpiry, WatchEveryChange])
    }

    /// Grants at once when the hold fits and nobody waits ahead; else
    /// queues the request and waits to be granted by a release (which
    /// wakes only the waiters it let in) or by the holders' lease end.
    async fn acquire(&self, request: &AcquireRequest) -> Result<Option<Acquired>, LockError> {
        let asked_at = Instant::now();
        let admission = self.store.table().admit(request, request.wait.may_wait())?;
        let (waiter, wake) = match admission {
            Admission::Granted(token) => return Ok(Some(self.acquired(request, token, asked_at))),
            Admission::Busy => return Ok(None),
            Admission::Queued { waiter, wake } => (waiter, wake),
        };
        let mut ticket = Ticket {
            store: Arc::clone(&self.store),
            id: ObjectId::of(&request.name, request.kind),
            waiter,
            done: false,
        };
        loop {
            let soonest_expiry = {
                let mut table = self.store.table();
                if let Some((token, granted_at)) = table.collect(&ticket.id, waiter) {
                    ticket.done = true;
                    drop(table);
                    return Ok(Some(self.acquired(request, token, granted_at)));
                }
                table.soonest_expiry(&ticket.id)
            };
            match soonest_expiry {
                Some(at) => {
                    tokio::select! {
                        () = wake.notified() => {}
                        () = tokio::time::sleep_until(at.into()) => {
                            // Nothing announces an expiry: let in whom it frees.
                            let woken = self.store.table().dispatch(&ticket.id);
                            self.store.woke(woken);
                        }
                    }
                }
                None => wake.notified().await,
            }
        }
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<LockInfo>, LockError> {
        Ok(self.store.table().lock_holder(name).map(|(info, _)| info))
    }

    async fn holders(
        &self,
        name: &LockName,
        primitive: Primitive,
    ) -> Result<Vec<LockInfo>, LockError> {
        let id = ObjectId {
            name: name.clone(),
            semaphore: primitive == Primitive::Semaphore,
        };
        Ok(self.store.table().holders(&id))
    }

    fn watch(&self, name: &LockName) -> HolderStream {
        holder_stream(MemoryWatch::new(Arc::clone(&self.store), name))
    }

    async fn force_release(&self, name: &LockName) -> Result<bool, LockError> {
        let id = ObjectId::lock(name);
        let (any_live, woken) = self.store.table().remove_all(&id);
        self.store.woke(woken);
        Ok(any_live)
    }

    async fn purge_namespace(&self, namespace: &Namespace) -> Result<(), LockError> {
        let changed = self.store.table().purge_namespace(namespace);
        for (_, woken) in changed {
            self.store.woke(woken);
        }
        Ok(())
    }
}

/// A queued request; dropping it before it is `done` withdraws the request
/// (giving back the hold if it was granted meanwhile), so a cancelled
/// acquire leaves nothing behind.
struct Ticket {
    store: Arc<Shared>,
    id: ObjectId,
    waiter: u64,
    done: bool,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.done {
            let woken = self.store.table().withdraw(&self.id, self.waiter);
            self.store.woke(woken);
        }
    }
}

/// One hold in a memory store.
#[derive(Debug)]
struct MemoryHeld {
    store: Arc<Shared>,
    id: ObjectId,
    owner: OwnerId,
}

impl MemoryHeld {
    fn lost(&self) -> LockError {
        LockError::lost(self.id.name.key().as_str(), LossReason::RenewalRefused)
    }

    /// Owner-checked removal; `None` if the hold was not ours any more,
    /// else whether it was still live.
    fn remove_if_ours(&self) -> Option<bool> {
        let (live, woken) = self.store.table().remove(&self.id, &self.owner)?;
        self.store.woke(woken);
        Some(live)
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
        let mut table = self.store.table();
        let entry = table
            .entry_mut(&self.id, &self.owner)
            .ok_or_else(|| self.lost())?;
        entry.expires_at = Instant::now() + ttl;
        Ok(())
    }

    async fn release(&self) -> Result<(), LockError> {
        match self.remove_if_ours() {
            Some(true) => Ok(()),
            Some(false) | None => Err(self.lost()),
        }
    }

    async fn set_value(&self, value: &str) -> Result<(), LockError> {
        let set = self.store.table().set_value(&self.id, &self.owner, value);
        if set {
            Ok(())
        } else {
            Err(self.lost())
        }
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

    /// Every value change reaches a watch read only afterwards, in order;
    /// a watch that falls more than the queue behind reads again and goes
    /// on from the state then.
    #[tokio::test]
    async fn a_watch_gets_every_change_unless_it_falls_too_far_behind() {
        use futures_util::StreamExt;
        let locks = crate::Locker::memory("memory-tests-watch-queue").unwrap();
        let mut watch = locks.watch("k").unwrap();
        assert_eq!(watch.changed().await, None);
        let guard = locks.lock("k").await.unwrap();
        for i in 0..10 {
            guard.set_value(format!("v{i}")).await.unwrap();
        }
        let mut values = Vec::new();
        for _ in 0..11 {
            values.push(watch.changed().await.expect("held").value);
        }
        let expected: Vec<String> = std::iter::once(String::new())
            .chain((0..10).map(|i| format!("v{i}")))
            .collect();
        assert_eq!(values, expected);

        for i in 0..watch::WATCHER_QUEUE + 10 {
            guard.set_value(format!("w{i}")).await.unwrap();
        }
        let last = format!("w{}", watch::WATCHER_QUEUE + 9);
        assert_eq!(watch.changed().await.expect("held").value, last);
        guard.release().await.unwrap();
        assert_eq!(watch.next().await, Some(None));
    }

    #[test]
    fn url_forms() {
        let parse = |u: &str| crate::open::parse::<MemoryStore>(u).map(|p| p.config.name);
        assert_eq!(parse("mem://").unwrap(), "default");
        assert_eq!(parse("mem://jobs").unwrap(), "jobs");
        assert!(parse("mem://jobs/extra").is_err());
        assert!(parse("mem://u:p@jobs").is_err());
    }
}
