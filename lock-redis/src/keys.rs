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

use lock_core::LockName;

/// The Redis names of one lock (public so that operators and tests can
/// look at a lock's queue from outside distlock).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct LockKeys {
    /// The lock itself: a string `"<token> <owner>"` (followed by a
    /// newline and the holder's value, if it set one) with a PX expiry.
    pub(crate) lock: String,
    /// The fencing token counter (never expires).
    pub(crate) token: String,
    /// Present while the lock is watched: changes are published only then.
    pub(crate) watched: String,
    /// The waiters' owner ids in order of arrival (a list).
    pub(crate) queue: String,
    /// Each waiter's `"<deadline ms> <ttl ms> <grant channel>"` (a hash
    /// keyed by owner).
    pub(crate) waiters: String,
    /// The pub/sub channel its releases are announced on (Redlock).
    pub(crate) channel: String,
    /// The pub/sub channel every change of holder or value is announced
    /// on while [`watched`](Self::watched) exists. The scripts name it
    /// `KEYS[1] .. ':holder'`.
    pub(crate) holder: String,
    /// The readers: owner scored by the end of its lease (a sorted set).
    pub(crate) readers: String,
    /// Each reader's `"<token> <owner>"` (then `"\n<value>"`; a hash).
    pub(crate) read_values: String,
    /// The semaphore's permit holders, scored by the end of their lease.
    pub(crate) permits: String,
    /// Each permit holder's `"<token> <owner>"` (then `"\n<value>"`).
    pub(crate) permit_values: String,
    /// The limit the permits are held under.
    pub(crate) limit: String,
    /// The semaphore's token counter (never expires).
    pub(crate) permit_token: String,
    /// The semaphore's waiters, in order of arrival (a list).
    pub(crate) permit_queue: String,
    /// Each semaphore waiter's entry (a hash keyed by owner).
    pub(crate) permit_waiters: String,
}

impl LockKeys {
    /// The names of the lock `name`.
    pub(crate) fn new(name: &LockName) -> Self {
        let mut lock = String::from("distlock:{");
        encode_into(&mut lock, name.namespace().as_str());
        lock.push(':');
        encode_into(&mut lock, name.key().as_str());
        lock.push('}');
        Self {
            token: format!("{lock}:token"),
            watched: format!("{lock}:watched"),
            queue: format!("{lock}:queue"),
            waiters: format!("{lock}:waiters"),
            channel: format!("{lock}:released"),
            holder: format!("{lock}:holder"),
            readers: format!("{lock}:readers"),
            read_values: format!("{lock}:readvalues"),
            permits: format!("{lock}:permits"),
            permit_values: format!("{lock}:permitvalues"),
            limit: format!("{lock}:limit"),
            permit_token: format!("{lock}:permittoken"),
            permit_queue: format!("{lock}:permitqueue"),
            permit_waiters: format!("{lock}:permitwaiters"),
            lock,
        }
    }
}

impl LockKeys {
    /// The keys of the scripts that take and give back holds of the lock,
    /// exclusive or shared: lock, counter, watchers' marker, queue,
    /// waiters, readers, readers' values.
    pub(crate) fn with_readers(&self) -> [&str; 7] {
        [
            &self.lock,
            &self.token,
            &self.watched,
            &self.queue,
            &self.waiters,
            &self.readers,
            &self.read_values,
        ]
    }

    /// The keys of the semaphore's scripts: permits, their values, the
    /// limit, the counter, the line and its waiters.
    pub(crate) fn semaphore(&self) -> [&str; 6] {
        [
            &self.permits,
            &self.permit_values,
            &self.limit,
            &self.permit_token,
            &self.permit_queue,
            &self.permit_waiters,
        ]
    }

    /// The keys of a script that changes the lock and tells watchers:
    /// lock, watchers' marker.
    pub(crate) fn watched_lock(&self) -> [&str; 2] {
        [&self.lock, &self.watched]
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
        assert_eq!(k.lock, "distlock:{billing:invoices/2026}");
        assert_eq!(k.token, "distlock:{billing:invoices/2026}:token");
        assert_eq!(k.queue, "distlock:{billing:invoices/2026}:queue");
        assert_eq!(k.waiters, "distlock:{billing:invoices/2026}:waiters");
        assert_eq!(k.channel, "distlock:{billing:invoices/2026}:released");
        assert_eq!(k.watched, "distlock:{billing:invoices/2026}:watched");
        assert_eq!(k.holder, format!("{}:holder", k.lock));
        assert_eq!(k.readers, format!("{}:readers", k.lock));
        assert_eq!(k.read_values, format!("{}:readvalues", k.lock));
        assert_eq!(k.permits, format!("{}:permits", k.lock));
        assert_eq!(k.permit_values, format!("{}:permitvalues", k.lock));
        assert_eq!(k.limit, format!("{}:limit", k.lock));
        assert_eq!(k.permit_token, format!("{}:permittoken", k.lock));
        assert_eq!(k.permit_queue, format!("{}:permitqueue", k.lock));
        assert_eq!(k.permit_waiters, format!("{}:permitwaiters", k.lock));
    }

    #[test]
    fn braces_stay_inside_the_hash_tag() {
        let k = keys("ns", "a}b{c%7D");
        assert_eq!(hash_tag(&k.lock), "ns:a%7Db%7Bc%257D");
        for other in k.with_readers().into_iter().chain(k.semaphore()) {
            assert_eq!(hash_tag(&k.lock), hash_tag(other));
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
            assert!(seen.insert(k.lock.clone()), "{ns}/{key}");
            for name in k.with_readers().into_iter().skip(1).chain(k.semaphore()) {
                assert!(seen.insert(name.to_owned()), "{ns}/{key}");
            }
        }
    }
}
