//! Redis key and channel names of a lock.
//!
//! A lock `(namespace, key)` lives in `distlock:{<ns>:<key>}`, its waiters
//! in `distlock:{<ns>:<key>}:queue` (a list, in order of arrival) and
//! `distlock:{<ns>:<key>}:waiters` (a hash: each waiter's liveness
//! deadline, lease and grant channel), and its releases are published on
//! `distlock:{<ns>:<key>}:released` (Redlock; on one instance or a
//! cluster a release hands the lock to a waiter and tells it on its
//! backend's own grant channel). While someone watches the lock, the
//! marker `distlock:{<ns>:<key>}:watched` exists and every change of
//! holder or value is published on `distlock:{<ns>:<key>}:holder` (see
//! [`watch`](crate::watch)). Read locks are the sorted set
//! `distlock:{<ns>:<key>}:readers` (owner scored by lease end, server
//! clock, ms) and the hash `distlock:{<ns>:<key>}:readvalues` (owner ->
//! `"<token> <owner>"`, then a newline and the value). The semaphore of the
//! name has the same layout: permits `distlock:{<ns>:<key>}:permits` and
//! `…:permitvalues`, its limit `…:limit` and its own line `…:permitqueue`
//! and `…:permitwaiters` (see [`shared`](crate::shared)). The part in
//! braces is a Redis Cluster hash tag, so all of a lock's keys share a
//! slot and one script can touch them all.
//!
//! None of these outlives its use: the lock and the limit expire with
//! their leases (and go with the last holder), sorted sets, hashes and
//! lists vanish when emptied and expire with their longest lease or
//! waiter, the marker expires 30 s after the last watcher's read.
//!
//! **Fencing counters** are not per name (see [`counter`](crate::counter)):
//! `distlock:{<ns>:}:token` per namespace on one server, a Sentinel master
//! and each Redlock master; `distlock:{<ns>:%cDDDDDD}:token` per namespace
//! and slot on a cluster, hashing to the lock's slot. Locks, read locks,
//! elections and the semaphore of a name all draw from the counter of
//! their bucket. A counter's name is never a lock's: every key of a lock
//! is `distlock:{<ns>:<encoded key>}` followed by a suffix, where the
//! encoded key is not empty (keys have 1 to 512 bytes), has no `}`, and
//! has `%` only as the start of `%25`, `%7B` or `%7D`. A namespace has no
//! `:`, so the namespace of a name is what lies between `{` and the first
//! `:`, and two equal names have the same namespace; what follows is `}`
//! for a one-server counter and `%c` for a cluster counter, and neither
//! starts an encoded key. For the same reason `distlock:{<ns>:*` matches
//! every key of the namespace and nothing else (see
//! [`purge`](crate::purge)).
//!
//! Namespace and key are percent-encoded for `%`, `{` and `}`: a key with a
//! `}` would otherwise end the hash tag early (every key with the same
//! prefix would crowd into one slot), and the encoding stays injective
//! (distinct locks never share a Redis key).

use std::sync::Arc;

use lock_core::LockName;

use crate::counter::Counters;

/// The parts of a lock's names, in the order they are laid out in
/// [`LockKeys`]: each is the lock's name followed by its suffix.
#[derive(Clone, Copy)]
enum Part {
    Lock,
    Watched,
    Queue,
    Waiters,
    Channel,
    Holder,
    Readers,
    ReadValues,
    Permits,
    PermitValues,
    Limit,
    PermitQueue,
    PermitWaiters,
}

/// The number of [`Part`]s.
const PARTS: usize = 13;

/// The suffix of each [`Part`], by its number.
const SUFFIXES: [&str; PARTS] = [
    "",
    ":watched",
    ":queue",
    ":waiters",
    ":released",
    ":holder",
    ":readers",
    ":readvalues",
    ":permits",
    ":permitvalues",
    ":limit",
    ":permitqueue",
    ":permitwaiters",
];

/// Where each part's suffixes start, not counting the lock names before
/// it: the sum of the lengths of the suffixes before it.
const SUFFIX_OFFSETS: [usize; PARTS] = {
    let mut offsets = [0; PARTS];
    let mut i = 1;
    while i < PARTS {
        offsets[i] = offsets[i - 1] + SUFFIXES[i - 1].len();
        i += 1;
    }
    offsets
};

/// The Redis names of one lock, built once per operation in one
/// allocation and shared (cloning costs a reference count).
///
/// * `lock()`: a string `"<token> <owner>"` (followed by a newline and the
///   holder's value, if it set one) with a PX expiry;
/// * `counter()`: the fencing token counter of the lock's bucket (never
///   expires; shared with the other names of the bucket);
/// * `watched()`: present while the lock is watched (changes are
///   published only then);
/// * `queue()`: the waiters' owner ids in order of arrival (a list);
/// * `waiters()`: each waiter's `"<deadline ms> <ttl ms> <grant channel>"`
///   (a hash keyed by owner);
/// * `channel()`: the pub/sub channel releases are announced on (Redlock);
/// * `holder()`: the pub/sub channel every change of holder or value is
///   announced on while `watched()` exists (the scripts name it
///   `KEYS[1] .. ':holder'`);
/// * `readers()`, `read_values()`: the readers, scored by the end of their
///   lease (a sorted set), and each one's `"<token> <owner>"` (then
///   `"\n<value>"`; a hash);
/// * `permits()`, `permit_values()`, `limit()`, `permit_queue()`,
///   `permit_waiters()`: the semaphore's holders, their values, the limit
///   they hold under, its line and waiters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct LockKeys {
    /// Every name, one after the other, in the order of [`Part`], then
    /// the counter's.
    all: Arc<str>,
    /// The length of the lock's own name.
    base: usize,
    /// Where the counter's name starts in `all`.
    counter: usize,
}

impl LockKeys {
    /// The names of the lock `name`, its counter as `counters` says.
    pub(crate) fn new(name: &LockName, counters: Counters) -> Self {
        let mut lock = String::from("distlock:{");
        encode_into(&mut lock, name.namespace().as_str());
        lock.push(':');
        let prefix_len = lock.len() - "distlock:{".len();
        encode_into(&mut lock, name.key().as_str());
        lock.push('}');
        let base = lock.len();
        let suffixes: usize = SUFFIXES.iter().map(|s| s.len()).sum();
        let mut all = String::with_capacity(base * (PARTS + 1) + suffixes + 16);
        for suffix in SUFFIXES {
            all.push_str(&lock);
            all.push_str(suffix);
        }
        let counter = all.len();
        counters.push_name(&mut all, &lock["distlock:{".len()..base - 1], prefix_len);
        Self {
            all: all.into(),
            base,
            counter,
        }
    }

    fn part(&self, part: Part) -> &str {
        let i = part as usize;
        let start = i * self.base + SUFFIX_OFFSETS[i];
        &self.all[start..start + self.base + SUFFIXES[i].len()]
    }

    pub(crate) fn lock(&self) -> &str {
        self.part(Part::Lock)
    }
    pub(crate) fn counter(&self) -> &str {
        &self.all[self.counter..]
    }
    pub(crate) fn watched(&self) -> &str {
        self.part(Part::Watched)
    }
    pub(crate) fn queue(&self) -> &str {
        self.part(Part::Queue)
    }
    pub(crate) fn waiters(&self) -> &str {
        self.part(Part::Waiters)
    }
    pub(crate) fn channel(&self) -> &str {
        self.part(Part::Channel)
    }
    pub(crate) fn holder(&self) -> &str {
        self.part(Part::Holder)
    }
    pub(crate) fn readers(&self) -> &str {
        self.part(Part::Readers)
    }
    pub(crate) fn read_values(&self) -> &str {
        self.part(Part::ReadValues)
    }
    pub(crate) fn permits(&self) -> &str {
        self.part(Part::Permits)
    }
    pub(crate) fn permit_values(&self) -> &str {
        self.part(Part::PermitValues)
    }
    pub(crate) fn limit(&self) -> &str {
        self.part(Part::Limit)
    }
    pub(crate) fn permit_queue(&self) -> &str {
        self.part(Part::PermitQueue)
    }
    pub(crate) fn permit_waiters(&self) -> &str {
        self.part(Part::PermitWaiters)
    }

    /// The keys of the scripts that take and give back holds of the lock,
    /// exclusive or shared: lock, counter, watchers' marker, queue,
    /// waiters, readers, readers' values.
    pub(crate) fn with_readers(&self) -> [&str; 7] {
        [
            self.lock(),
            self.counter(),
            self.watched(),
            self.queue(),
            self.waiters(),
            self.readers(),
            self.read_values(),
        ]
    }

    /// The keys of the semaphore's scripts: permits, their values, the
    /// limit, the counter, the line and its waiters.
    pub(crate) fn semaphore(&self) -> [&str; 6] {
        [
            self.permits(),
            self.permit_values(),
            self.limit(),
            self.counter(),
            self.permit_queue(),
            self.permit_waiters(),
        ]
    }

    /// The keys of a script that changes the lock and tells watchers:
    /// lock, watchers' marker.
    pub(crate) fn watched_lock(&self) -> [&str; 2] {
        [self.lock(), self.watched()]
    }
}

fn encode_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::counter::slot_of_tag;
    use lock_core::{LockKey, Namespace};

    fn name(ns: &str, key: &str) -> LockName {
        LockName::new(Namespace::new(ns).unwrap(), LockKey::new(key).unwrap())
    }

    fn keys(ns: &str, key: &str) -> LockKeys {
        LockKeys::new(&name(ns, key), Counters::PerNamespace)
    }

    /// The hash tag as Redis Cluster computes it: between the first `{`
    /// and the next `}`.
    pub(crate) fn hash_tag(key: &str) -> &str {
        let open = key.find('{').unwrap();
        let close = key[open + 1..].find('}').unwrap() + open + 1;
        &key[open + 1..close]
    }

    #[test]
    fn layout() {
        let k = keys("billing", "invoices/2026");
        assert_eq!(k.lock(), "distlock:{billing:invoices/2026}");
        assert_eq!(k.counter(), "distlock:{billing:}:token");
        assert_eq!(k.queue(), "distlock:{billing:invoices/2026}:queue");
        assert_eq!(k.waiters(), "distlock:{billing:invoices/2026}:waiters");
        assert_eq!(k.channel(), "distlock:{billing:invoices/2026}:released");
        assert_eq!(k.watched(), "distlock:{billing:invoices/2026}:watched");
        assert_eq!(k.holder(), format!("{}:holder", k.lock()));
        assert_eq!(k.readers(), format!("{}:readers", k.lock()));
        assert_eq!(k.read_values(), format!("{}:readvalues", k.lock()));
        assert_eq!(k.permits(), format!("{}:permits", k.lock()));
        assert_eq!(k.permit_values(), format!("{}:permitvalues", k.lock()));
        assert_eq!(k.limit(), format!("{}:limit", k.lock()));
        assert_eq!(k.permit_queue(), format!("{}:permitqueue", k.lock()));
        assert_eq!(k.permit_waiters(), format!("{}:permitwaiters", k.lock()));
        let cluster = LockKeys::new(&name("billing", "invoices/2026"), Counters::PerSlot);
        assert_eq!(cluster.lock(), k.lock());
        assert!(
            cluster.counter().starts_with("distlock:{billing:%c")
                && cluster.counter().ends_with("}:token"),
            "{}",
            cluster.counter()
        );
    }

    #[test]
    fn every_name_shares_the_locks_slot() {
        let k = LockKeys::new(&name("ns", "a}b{c%7D"), Counters::PerSlot);
        assert_eq!(hash_tag(k.lock()), "ns:a%7Db%7Bc%257D");
        let slot = slot_of_tag(hash_tag(k.lock()).as_bytes());
        for other in k.with_readers().into_iter().chain(k.semaphore()) {
            assert_eq!(slot_of_tag(hash_tag(other).as_bytes()), slot, "{other}");
        }
        for other in k.with_readers().into_iter().chain(k.semaphore()) {
            if other != k.counter() {
                assert_eq!(hash_tag(k.lock()), hash_tag(other));
            }
        }
    }

    /// Every name stays in the namespace's ACL prefix, and no counter is
    /// ever a lock's name, whatever the key (even one spelled like a
    /// counter's tag).
    #[test]
    fn names_are_distinct_and_inside_the_namespace() {
        let names = [
            ("a", "b}"),
            ("a", "b%7D"),
            ("a", "b"),
            ("a", "b}:token"),
            ("a", "}:token"),
            ("a", "%c000000}:token"),
            ("a", "%c"),
            ("a.b", "c"),
            ("a", "b.c"),
            ("a", ":"),
        ];
        let mut locks = std::collections::HashSet::new();
        let mut counters = std::collections::HashSet::new();
        for (ns, key) in names {
            for counters_of in [Counters::PerNamespace, Counters::PerSlot] {
                let k = LockKeys::new(&name(ns, key), counters_of);
                let prefix = format!("distlock:{{{ns}:");
                for part in k.with_readers().into_iter().chain(k.semaphore()) {
                    assert!(part.starts_with(&prefix), "{part}");
                }
                counters.insert(k.counter().to_owned());
                if counters_of == Counters::PerSlot {
                    continue;
                }
                assert!(locks.insert(k.lock().to_owned()), "{ns}/{key}");
                for part in k.with_readers().into_iter().chain(k.semaphore()) {
                    if part != k.counter() && part != k.lock() {
                        assert!(locks.insert(part.to_owned()), "{ns}/{key}");
                    }
                }
            }
        }
        assert!(locks.is_disjoint(&counters));
    }
}
