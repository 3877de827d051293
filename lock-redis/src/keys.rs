//! Redis key and channel names of a lock.
//!
//! A lock `(namespace, key)` lives in `distlock:{<ns>:<key>}`, its fencing
//! counter in `distlock:{<ns>:<key>}:token`, its waiters in
//! `distlock:{<ns>:<key>}:queue` (a list, in order of arrival) and
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
//! name is a separate object with the same layout: permits
//! `distlock:{<ns>:<key>}:permits` and `…:permitvalues`, its limit
//! `…:limit`, its counter `…:permittoken` and its own line
//! `…:permitqueue` and `…:permitwaiters` (see [`shared`](crate::shared)).
//! The part in braces is a Redis Cluster hash
//! tag, so all of a lock's keys share a slot and one script can touch
//! them all.
//!
//! Namespace and key are percent-encoded for `%`, `{` and `}`: a key with a
//! `}` would otherwise end the hash tag early (every key with the same
//! prefix would crowd into one slot), and the encoding stays injective
//! (distinct locks never share a Redis key).

use std::sync::Arc;

use lock_core::LockName;

/// The parts of a lock's names, in the order they are laid out in
/// [`LockKeys`]: each is the lock's name followed by its suffix.
#[derive(Clone, Copy)]
enum Part {
    Lock,
    Token,
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
    PermitToken,
    PermitQueue,
    PermitWaiters,
}

/// The suffix of each [`Part`], by its number.
const SUFFIXES: [&str; 15] = [
    "",
    ":token",
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
    ":permittoken",
    ":permitqueue",
    ":permitwaiters",
];

/// Where each part's suffixes start, not counting the lock names before
/// it: the sum of the lengths of the suffixes before it.
const SUFFIX_OFFSETS: [usize; 15] = {
    let mut offsets = [0; 15];
    let mut i = 1;
    while i < 15 {
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
/// * `token()`: the fencing token counter (never expires);
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
/// * `permits()`, `permit_values()`, `limit()`, `permit_token()`,
///   `permit_queue()`, `permit_waiters()`: the semaphore's holders, their
///   values, the limit they hold under, its counter, line and waiters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct LockKeys {
    /// Every name, one after the other, in the order of [`Part`].
    all: Arc<str>,
    /// The length of the lock's own name.
    base: usize,
}

impl LockKeys {
    /// The names of the lock `name`.
    pub(crate) fn new(name: &LockName) -> Self {
        let mut lock = String::from("distlock:{");
        encode_into(&mut lock, name.namespace().as_str());
        lock.push(':');
        encode_into(&mut lock, name.key().as_str());
        lock.push('}');
        let base = lock.len();
        let suffixes: usize = SUFFIXES.iter().map(|s| s.len()).sum();
        let mut all = String::with_capacity(base * SUFFIXES.len() + suffixes);
        for suffix in SUFFIXES {
            all.push_str(&lock);
            all.push_str(suffix);
        }
        Self {
            all: all.into(),
            base,
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
    pub(crate) fn token(&self) -> &str {
        self.part(Part::Token)
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
    pub(crate) fn permit_token(&self) -> &str {
        self.part(Part::PermitToken)
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
            self.token(),
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
            self.permit_token(),
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
mod tests {
    use super::*;
    use lock_core::{LockKey, Namespace};

    fn keys(ns: &str, key: &str) -> LockKeys {
        LockKeys::new(&LockName::new(
            Namespace::new(ns).unwrap(),
            LockKey::new(key).unwrap(),
        ))
    }

    /// The hash tag as Redis Cluster computes it: between the first `{`
    /// and the next `}`.
    fn hash_tag(key: &str) -> &str {
        let open = key.find('{').unwrap();
        let close = key[open + 1..].find('}').unwrap() + open + 1;
        &key[open + 1..close]
    }

    #[test]
    fn layout() {
        let k = keys("billing", "invoices/2026");
        assert_eq!(k.lock(), "distlock:{billing:invoices/2026}");
        assert_eq!(k.token(), "distlock:{billing:invoices/2026}:token");
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
        assert_eq!(k.permit_token(), format!("{}:permittoken", k.lock()));
        assert_eq!(k.permit_queue(), format!("{}:permitqueue", k.lock()));
        assert_eq!(k.permit_waiters(), format!("{}:permitwaiters", k.lock()));
    }

    #[test]
    fn braces_stay_inside_the_hash_tag() {
        let k = keys("ns", "a}b{c%7D");
        assert_eq!(hash_tag(k.lock()), "ns:a%7Db%7Bc%257D");
        for other in k.with_readers().into_iter().chain(k.semaphore()) {
            assert_eq!(hash_tag(k.lock()), hash_tag(other));
        }
    }

    #[test]
    fn encoding_is_injective() {
        let names = [
            ("a", "b}"),
            ("a", "b%7D"),
            ("a", "b"),
            ("a", "b}:token"),
            ("a.b", "c"),
            ("a", "b.c"),
        ];
        let mut seen = std::collections::HashSet::new();
        for (ns, key) in names {
            let k = keys(ns, key);
            assert!(seen.insert(k.lock().to_owned()), "{ns}/{key}");
            for name in k.with_readers().into_iter().skip(1).chain(k.semaphore()) {
                assert!(seen.insert(name.to_owned()), "{ns}/{key}");
            }
        }
    }
}
