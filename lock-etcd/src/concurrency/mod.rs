//! `layout=concurrency`: locks and elections laid out as etcd's Go
//! `concurrency` package (`Mutex`, `Election`) and `etcdctl lock` /
//! `etcdctl elect` lay them out, so those clients and distlock exclude
//! each other on the same names.
//!
//! The lock (or election) named `K` is every key under the prefix
//! `<key_prefix>K/`; the locker's namespace is not part of it. Each hold
//! is one key `<key_prefix>K/<lease id in lowercase hex>` on a lease,
//! its value the holder's value alone. The key with the lowest create
//! revision under the prefix holds; the others wait, each for the
//! deletion of the newest key created before its own, as the Go clients
//! do (the wait itself is the queue's, [`crate::queue::Turn`]). A
//! prefix holds the keys of longer names too: a holder of `a/b` (key
//! `a/b/<lease>`) is under `a/`, so it blocks `a`, exactly as it does
//! for the Go clients.
//!
//! A Go session has one key per prefix on its lease. A distlock locker
//! uses its session lease for its first hold of a name; a second hold of
//! the same name by the same locker (waiting or trying while the first
//! holds or waits) gets a lease of its own, revoked with the hold, so
//! that each hold has its own key, token and place in line.
//!
//! `acquire` takes a hold; `owners` remembers which entries are this
//! process's and whose.

mod acquire;
mod owners;

use lock_core::backend::Capabilities;
use lock_core::backend::Capability::{
    Expiry, Fifo, ForceRelease, NotifiedWakeups, Remote, WatchEveryChange,
};
use lock_core::{FencingToken, LockInfo, LockName};

pub(crate) use acquire::acquire;
pub(crate) use owners::OwnerRecord;

/// The backend's name in this layout: in metrics, traces and the
/// `NotSupported` errors of what the layout cannot express.
pub(crate) const NAME: &str = "etcd-concurrency";

/// What the layout offers: no read-write locks, semaphores or namespaced
/// keys (the Go recipes have none), and no lock expires while its locker
/// lives. A watch applies every event of the prefix, as the distlock
/// layout's does.
pub(crate) const CAPABILITIES: Capabilities = Capabilities::of(&[
    Expiry,
    ForceRelease,
    NotifiedWakeups,
    Fifo,
    Remote,
    WatchEveryChange,
]);

/// The prefix of lock `name`: `<key_prefix><key>/`.
pub(crate) fn lock_prefix(key_prefix: &str, name: &LockName) -> Vec<u8> {
    format!("{key_prefix}{}/", name.key()).into_bytes()
}

/// The key of a hold under `prefix` on lease `lease`: the lease id in
/// lowercase hex without padding (Go's `%x`).
pub(crate) fn entry_key(prefix: &[u8], lease: i64) -> Vec<u8> {
    let hex = match lease {
        id if id < 0 => format!("-{:x}", id.unsigned_abs()),
        id => format!("{id:x}"),
    };
    let mut key = prefix.to_vec();
    key.extend_from_slice(hex.as_bytes());
    key
}

/// The holder an entry describes: its create revision as the token, its
/// value as the holder's value, and as the owner our owner id if a locker
/// of this process made it, else the entry's key.
pub(crate) fn holder_info(key: &[u8], token: i64, value: &[u8]) -> LockInfo {
    let owner = owners::owner_of(key, token);
    let token = FencingToken::new(u64::try_from(token).unwrap_or(0));
    LockInfo::new(owner, token, None).with_value(String::from_utf8_lossy(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::{LockKey, Namespace};

    fn name(key: &str) -> LockName {
        LockName::new(Namespace::new("ns").unwrap(), LockKey::new(key).unwrap())
    }

    #[test]
    fn keys_are_the_go_clients_keys() {
        let prefix = lock_prefix("", &name("jobs/nightly"));
        assert_eq!(prefix, b"jobs/nightly/");
        let key = entry_key(&prefix, 0x694d_77aa_9e38_f00e);
        assert_eq!(key, b"jobs/nightly/694d77aa9e38f00e");
        assert_eq!(entry_key(b"k/", 0xab), b"k/ab");
        assert_eq!(lock_prefix("app/", &name("k")), b"app/k/");
    }

    #[test]
    fn a_name_contains_the_keys_of_longer_names() {
        let outer = lock_prefix("", &name("a"));
        let inner = entry_key(&lock_prefix("", &name("a/b")), 1);
        assert!(inner.starts_with(&outer));
        let sibling = entry_key(&lock_prefix("", &name("ab")), 1);
        assert!(!sibling.starts_with(&outer));
    }
}
