//! The memory store's state: every [`Object`] (a name's lock, or its
//! semaphore) with its holders, limit and queue of waiters, served in
//! order, and the token counters.
//!
//! Every change that can let a waiter in (a release, an expiry found, a
//! cancelled waiter) runs [`Table::dispatch`], which grants the queue's
//! front for as long as it fits beside the holders and returns the
//! waiters it granted, so that exactly those are woken.
//!
//! Watches of a lock's holder are kept here too ([`Table::watch`]; the
//! queues themselves in [`Watchers`]): every change the table makes to a
//! lock's first holder or value is delivered to them while it is still
//! locked ([`Table::publish`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Notify;

use super::object::{Ask, Entry, Object, ObjectId, Waiter};
use super::watch::{HolderState, WatchFeed, Watchers};
use crate::backend::AcquireRequest;
use crate::error::LockError;
use crate::info::{HoldKind, LockInfo};
use crate::key::{LockName, Namespace};
use crate::loss_reason::LossReason;
use crate::owner::OwnerId;
use crate::token::FencingToken;

/// How a request was met.
#[derive(Debug)]
pub(super) enum Admission {
    /// Held now, with this token.
    Granted(FencingToken),
    /// Queued: wait on `wake`, then [`Table::collect`] with `waiter`.
    Queued { waiter: u64, wake: Arc<Notify> },
    /// Not free, and the request may not wait.
    Busy,
}

/// Every object of one memory store.
#[derive(Debug, Default)]
pub(super) struct Table {
    objects: HashMap<ObjectId, Object>,
    /// Token counters, never reset.
    counters: HashMap<ObjectId, u64>,
    next_waiter: u64,
    /// The watches of each lock's holder.
    watchers: Watchers,
}

impl Table {
    /// Grants `request` at once if it fits and nobody waits ahead of it;
    /// else queues it if it may wait.
    pub(super) fn admit(
        &mut self,
        request: &AcquireRequest,
        may_wait: bool,
    ) -> Result<Admission, LockError> {
        let now = Instant::now();
        let id = ObjectId::of(&request.name, request.kind);
        if self.objects.entry(id.clone()).or_default().purge(now) {
            // An expiry found is a change, before what this request does.
            self.publish(&id);
        }
        let object = self.objects.get_mut(&id).expect("the object just made");
        if let HoldKind::Permit { limit } = request.kind {
            match object.limit {
                Some(stored) if stored != limit && !object.holders.is_empty() => {
                    return Err(LockError::LimitMismatch {
                        key: request.name.key().to_string(),
                        stored,
                        asked: limit,
                    });
                }
                _ => object.limit = Some(limit),
            }
        }
        if object.queue.is_empty() && object.fits(request.kind) {
            let token = self.grant(&id, Ask::of(request), now);
            self.publish(&id);
            return Ok(Admission::Granted(token));
        }
        if !may_wait {
            self.forget_if_unused(&id);
            return Ok(Admission::Busy);
        }
        self.next_waiter += 1;
        let waiter = Waiter {
            id: self.next_waiter,
            ask: Ask::of(request),
            wake: Arc::new(Notify::new()),
        };
        let wake = Arc::clone(&waiter.wake);
        object.queue.push_back(waiter);
        Ok(Admission::Queued {
            waiter: self.next_waiter,
            wake,
        })
    }

    /// Grants the queue's front of `id` while it fits; returns the wake-ups
    /// of the waiters granted.
    pub(super) fn dispatch(&mut self, id: &ObjectId) -> Vec<Arc<Notify>> {
        let now = Instant::now();
        let mut woken = Vec::new();
        while let Some(object) = self.objects.get_mut(id) {
            if object.purge(now) {
                // The expiry found, before whom it lets in.
                self.publish(id);
            }
            let object = self.objects.get_mut(id).expect("the object just purged");
            let fits = object
                .queue
                .front()
                .is_some_and(|w| object.fits(w.ask.kind));
            if !fits {
                break;
            }
            let waiter = object.queue.pop_front().expect("a front waiter");
            let token = self.grant(id, waiter.ask, now);
            self.objects
                .get_mut(id)
                .expect("the object just granted in")
                .granted
                .insert(waiter.id, (token, now));
            woken.push(waiter.wake);
        }
        self.publish(id);
        self.forget_if_unused(id);
        woken
    }

    /// The token of `waiter` and the start of its lease, if it was granted
    /// (it then holds).
    pub(super) fn collect(
        &mut self,
        id: &ObjectId,
        waiter: u64,
    ) -> Option<(FencingToken, Instant)> {
        self.objects.get_mut(id)?.granted.remove(&waiter)
    }

    /// Withdraws `waiter` (its call was dropped): out of the queue, or, if
    /// it was granted meanwhile, its hold given back. Returns the wake-ups
    /// of waiters this lets in.
    pub(super) fn withdraw(&mut self, id: &ObjectId, waiter: u64) -> Vec<Arc<Notify>> {
        let Some(object) = self.objects.get_mut(id) else {
            return Vec::new();
        };
        object.queue.retain(|w| w.id != waiter);
        if let Some((token, _)) = object.granted.remove(&waiter) {
            object.holders.retain(|h| h.token != token);
        }
        self.dispatch(id)
    }

    /// The soonest end of a lease among the holders of `id`.
    pub(super) fn soonest_expiry(&self, id: &ObjectId) -> Option<Instant> {
        self.objects.get(id).and_then(Object::soonest_expiry)
    }

    /// The live holders of `id`, oldest first.
    pub(super) fn holders(&self, id: &ObjectId) -> Vec<LockInfo> {
        let now = Instant::now();
        self.objects.get(id).map_or_else(Vec::new, |object| {
            object
                .holders
                .iter()
                .filter(|e| e.live(now))
                .map(|e| e.info(now))
                .collect()
        })
    }

    /// The live hold of `owner` in `id`.
    pub(super) fn entry_mut(&mut self, id: &ObjectId, owner: &OwnerId) -> Option<&mut Entry> {
        let now = Instant::now();
        self.objects
            .get_mut(id)?
            .holders
            .iter_mut()
            .find(|e| &e.owner == owner && e.live(now))
    }

    /// Removes the hold of `owner` from `id`: `None` if it had none,
    /// else whether it was still live, and the wake-ups this causes.
    pub(super) fn remove(
        &mut self,
        id: &ObjectId,
        owner: &OwnerId,
    ) -> Option<(bool, Vec<Arc<Notify>>)> {
        let object = self.objects.get_mut(id)?;
        let at = object.holders.iter().position(|e| &e.owner == owner)?;
        let live = object.holders.remove(at).live(Instant::now());
        Some((live, self.dispatch(id)))
    }

    /// Removes every hold of `id`, telling each holder it was taken away.
    /// Returns whether any was live, and the wake-ups this causes.
    pub(super) fn remove_all(&mut self, id: &ObjectId) -> (bool, Vec<Arc<Notify>>) {
        let now = Instant::now();
        let Some(object) = self.objects.get_mut(id) else {
            return (false, Vec::new());
        };
        let mut any_live = false;
        for entry in object.holders.drain(..) {
            any_live |= entry.live(now);
            entry.reporter.report(LossReason::TakenAway);
        }
        (any_live, self.dispatch(id))
    }

    /// Removes every hold in `namespace` (each holder is told it was taken
    /// away) and forgets its objects and counters. Waiters already queued
    /// stay queued and are granted as if they had just asked. Returns the
    /// objects that changed and the wake-ups this causes.
    pub(super) fn purge_namespace(
        &mut self,
        namespace: &Namespace,
    ) -> Vec<(ObjectId, Vec<Arc<Notify>>)> {
        let ids: Vec<ObjectId> = self
            .objects
            .keys()
            .filter(|id| id.name.namespace() == namespace)
            .cloned()
            .collect();
        let changed: Vec<_> = ids
            .into_iter()
            .map(|id| {
                let (_, woken) = self.remove_all(&id);
                self.forget_if_unused(&id);
                (id, woken)
            })
            .collect();
        let objects = &self.objects;
        self.counters
            .retain(|id, _| id.name.namespace() != namespace || objects.contains_key(id));
        changed
    }

    /// Replaces the value of `owner`'s live hold in `id`; false if it has
    /// none.
    pub(super) fn set_value(&mut self, id: &ObjectId, owner: &OwnerId, value: &str) -> bool {
        let Some(entry) = self.entry_mut(id, owner) else {
            return false;
        };
        entry.value = value.to_owned();
        self.publish(id);
        true
    }

    /// The first live holder of `name`'s lock and when its lease ends.
    pub(super) fn lock_holder(&self, name: &LockName) -> HolderState {
        let object = self.objects.get(&ObjectId::lock(name))?;
        object.first_holder(Instant::now())
    }

    /// Watches `name`'s lock: its holder now, and the feed of every later
    /// state ([`publish`](Self::publish)).
    pub(super) fn watch(&mut self, name: &LockName) -> (HolderState, WatchFeed) {
        let now = self.lock_holder(name);
        let feed = self.watchers.add(name, &now);
        (now, feed)
    }

    /// Reads `name`'s holder again for watcher `feed`, which drops what it
    /// had queued (older than this read): the holder now. Sets the watch
    /// again if it was gone.
    pub(super) fn rewatch(&mut self, name: &LockName, feed: &mut WatchFeed) -> HolderState {
        feed.clear();
        let now = self.lock_holder(name);
        if !self.watchers.read_again(name, feed.id, &now) {
            *feed = self.watchers.add(name, &now);
        }
        now
    }

    /// Stops watcher `id` of `name`.
    pub(super) fn unwatch(&mut self, name: &LockName, id: u64) {
        self.watchers.remove(name, id);
    }

    /// Queues the holder of `id`'s lock on each of its watchers that was
    /// last given another state. Called, with the table locked, after
    /// everything that may change a lock's first holder or its value, so
    /// every change reaches every watcher in order.
    fn publish(&mut self, id: &ObjectId) {
        if id.semaphore || !self.watchers.any(&id.name) {
            return;
        }
        let now = self
            .objects
            .get(id)
            .and_then(|object| object.first_holder(Instant::now()));
        self.watchers.deliver(&id.name, &now);
    }

    fn grant(&mut self, id: &ObjectId, ask: Ask, now: Instant) -> FencingToken {
        let counter = self.counters.entry(id.clone()).or_insert(0);
        *counter += 1;
        let token = FencingToken::new(*counter);
        let object = self.objects.entry(id.clone()).or_default();
        object.holders.push(Entry {
            owner: ask.owner,
            token,
            kind: ask.kind,
            value: ask.value,
            expires_at: now + ask.ttl,
            reporter: ask.reporter,
        });
        token
    }

    fn forget_if_unused(&mut self, id: &ObjectId) {
        if self.objects.get(id).is_some_and(Object::is_unused) {
            self.objects.remove(id);
        }
    }
}
