//! Watching a lock's holder: a read of the whole queue at some revision,
//! then a watch on the queue's prefix from the next revision on.
//!
//! The holder is the entry with the lowest create revision, so the source
//! keeps a copy of the queue (key → create revision, value), applies each
//! event the watch passes on, and reports the holder after every revision
//! that changed it or its value: each change is seen, in the store's
//! order, with no read per change. The watch rides on the backend's
//! [`WatchHub`], which resumes it after a reconnect without a gap; if the
//! history it needs was compacted, `next_change` fails and the driver
//! reads the queue again. The time left on the holder's lease is not
//! reported (`ttl_left` is `None`): it would cost a request per change.
//! How an entry describes its holder depends on the layout
//! ([`Describe`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{Client, Event, EventType, GetOptions};
use lock_core::backend::{Change, HolderSource};
use lock_core::{LockError, LockInfo};
use tokio::sync::mpsc;

use crate::client::with_retries;
use crate::watch::{RangeFired, WatchGuard, WatchHub};

/// The holder an entry describes, from its key, create revision and
/// value (the time left on its lease unknown).
pub(crate) type Describe = fn(&[u8], i64, &[u8]) -> LockInfo;

/// One watch of one lock's holder; see the module docs.
pub(crate) struct QueueWatch {
    client: Client,
    hub: WatchHub,
    response_timeout: Duration,
    prefix: Vec<u8>,
    /// The lock key, for errors.
    key: String,
    describe: Describe,
    queue: Queue,
    /// The holder last reported: create revision and value bytes.
    reported: Option<(i64, Vec<u8>)>,
    /// Holder states found in a response and not returned yet.
    pending: VecDeque<Option<LockInfo>>,
    /// The prefix watch and where its events arrive; `None` until read.
    watch: Option<(WatchGuard, mpsc::UnboundedReceiver<RangeFired>)>,
}

impl QueueWatch {
    /// A watch of the queue under `prefix` (of lock `key`), whose entries
    /// `describe` their holders; nothing is sent to etcd before the first
    /// `read`.
    pub(crate) fn new(
        client: Client,
        hub: WatchHub,
        response_timeout: Duration,
        (prefix, key): (Vec<u8>, String),
        describe: Describe,
    ) -> Self {
        Self {
            client,
            hub,
            response_timeout,
            prefix,
            key,
            describe,
            queue: Queue::default(),
            reported: None,
            pending: VecDeque::new(),
            watch: None,
        }
    }

    /// The holder now, if it differs from the one last reported (then it
    /// becomes the one last reported).
    fn holder_if_changed(&mut self) -> Option<Option<LockInfo>> {
        let now = self.queue.head();
        let same = match (&self.reported, now) {
            (None, None) => true,
            (Some((token, value)), Some((now_token, _, now_value))) => {
                *token == now_token && value.as_slice() == now_value
            }
            _ => false,
        };
        if same {
            return None;
        }
        self.reported = now.map(|(token, _, value)| (token, value.to_vec()));
        Some(now.map(|(token, key, value)| (self.describe)(key, token, value)))
    }

    /// Applies the events of one response, queuing the holder after each
    /// revision that changed it.
    fn apply(&mut self, events: &[Event]) {
        let mut events = events.iter().filter_map(|event| Some((event, event.kv()?)));
        let Some((first, first_kv)) = events.next() else {
            return;
        };
        let mut revision = first_kv.mod_revision();
        self.queue.apply(first);
        for (event, kv) in events {
            if kv.mod_revision() != revision {
                revision = kv.mod_revision();
                if let Some(holder) = self.holder_if_changed() {
                    self.pending.push_back(holder);
                }
            }
            self.queue.apply(event);
        }
        if let Some(holder) = self.holder_if_changed() {
            self.pending.push_back(holder);
        }
    }

    fn watch_ended(&self, reason: &str) -> LockError {
        LockError::Unavailable {
            message: format!("the etcd watch of lock {} ended: {reason}", self.key),
            source: None,
        }
    }
}

#[async_trait]
impl HolderSource for QueueWatch {
    /// Reads the whole queue, then watches it from the revision after the
    /// read.
    async fn read(&mut self) -> Result<Option<LockInfo>, LockError> {
        self.watch = None;
        self.pending.clear();
        let deadline = Instant::now() + self.response_timeout;
        let mut response = with_retries(deadline, "cannot read the lock queue", || {
            let mut kv = self.client.kv_client();
            let prefix = self.prefix.clone();
            async move { kv.get(prefix, Some(GetOptions::new().with_prefix())).await }
        })
        .await?;
        let revision = response.header().map_or(0, |h| h.revision());
        self.queue = Queue::default();
        for kv in response.take_kvs() {
            let create_revision = kv.create_revision();
            let (key, value) = kv.into_key_value();
            self.queue.put(key, create_revision, value);
        }
        let (events_tx, events) = mpsc::unbounded_channel();
        let guard = self.hub.watch_prefix_from(
            self.prefix.clone(),
            revision + 1,
            Box::new(move |fired| {
                let _ = events_tx.send(fired);
            }),
        );
        self.watch = Some((guard, events));
        self.reported = None;
        let now = self.holder_if_changed();
        Ok(now.unwrap_or(None))
    }

    /// The holder after the next revision that changed it.
    async fn next_change(&mut self) -> Result<Change, LockError> {
        loop {
            if let Some(holder) = self.pending.pop_front() {
                return Ok(Change::Holder(holder));
            }
            let Some((_, events)) = self.watch.as_mut() else {
                return Ok(Change::Reread);
            };
            match events.recv().await {
                Some(RangeFired::Events(events)) => self.apply(&events),
                Some(RangeFired::Compacted) => {
                    self.watch = None;
                    return Err(self.watch_ended("the history it needs was compacted"));
                }
                Some(RangeFired::Refused(reason)) => {
                    self.watch = None;
                    return Err(LockError::Backend {
                        message: format!("etcd refused to watch lock {}: {reason}", self.key),
                        source: None,
                    });
                }
                None => {
                    self.watch = None;
                    return Err(self.watch_ended("the watch stream is gone"));
                }
            }
        }
    }
}

/// A copy of one lock's queue: every entry's key, create revision and
/// value.
#[derive(Default)]
struct Queue {
    /// Entry key → its create revision.
    by_key: HashMap<Vec<u8>, i64>,
    /// Create revision → key and value: the first is the holder's.
    by_revision: BTreeMap<i64, (Vec<u8>, Vec<u8>)>,
}

impl Queue {
    fn put(&mut self, key: Vec<u8>, create_revision: i64, value: Vec<u8>) {
        if let Some(old) = self.by_key.insert(key.clone(), create_revision) {
            if old != create_revision {
                self.by_revision.remove(&old);
            }
        }
        self.by_revision.insert(create_revision, (key, value));
    }

    fn delete(&mut self, key: &[u8]) {
        if let Some(create_revision) = self.by_key.remove(key) {
            self.by_revision.remove(&create_revision);
        }
    }

    fn apply(&mut self, event: &Event) {
        let Some(kv) = event.kv() else { return };
        match event.event_type() {
            EventType::Put => {
                self.put(kv.key().to_vec(), kv.create_revision(), kv.value().to_vec())
            }
            EventType::Delete => self.delete(kv.key()),
        }
    }

    /// The holder's create revision, key and value.
    fn head(&self) -> Option<(i64, &[u8], &[u8])> {
        self.by_revision
            .first_key_value()
            .map(|(revision, (key, value))| (*revision, key.as_slice(), value.as_slice()))
    }
}
