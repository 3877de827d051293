//! The `curator` layout: locks laid out as Apache Curator 5.x's recipes,
//! so that Curator clients and distlock lockers exclude each other.
//!
//! Name `K` lives at the znode `<base>/K` (the URL's path, the root by
//! default; the locker's namespace takes no part), created with its
//! missing parents as container nodes, as Curator's
//! `creatingParentContainersIfNeeded` does. Key segments are encoded as
//! in this crate's own layout ([`crate::names::encode_segment`]): plain
//! names stay as they are, and a segment starting with `_` is escaped, so
//! no key's directory looks like a Curator node (`_c_…`).
//!
//! Each way of taking a name uses the recipe a Curator client would:
//!
//! | taking | Curator recipe | our node |
//! |---|---|---|
//! | lock | InterProcessMutex | `K/_c_<uuid>-lock-<seq>` |
//! | leadership | LeaderLatch | `K/_c_<uuid>-latch-<seq>` |
//! | write lock | InterProcessReadWriteLock | `K/_c_<uuid>-__WRIT__<seq>` |
//! | read lock | InterProcessReadWriteLock | `K/_c_<uuid>-__READ__<seq>` |
//! | permit | InterProcessSemaphoreV2 | `K/leases/_c_<uuid>-lease-<seq>` |
//!
//! Nodes are ephemeral and sequential, named as Curator's protected mode
//! names them (the UUID is our contender id, which finds our node after a
//! lost create reply). Their data is the holder's value (empty if none):
//! no owner id is stored (see [`owners`]). The fencing token is the node's
//! czxid. Holders and waiters follow Curator's rules, in
//! [`crate::acquire`]'s queue: the first node holds (a reader: no writer
//! before it); a waiter watches the node it waits for and lists again
//! once that node is deleted. A release only deletes the node: Curator's
//! LeaderLatch waiters react to deletions only, so nothing may depend on
//! a write before it (this crate's own layout marks its releases; this
//! one never does).
//!
//! A plain lock on a name whose read-write lock is in use joins it as a
//! writer (see [`queue::RecipeQueue::for_taking`]): a name has one lock,
//! which its read-write lock shares. Otherwise, a directory that holds
//! another recipe's nodes is refused (see
//! [`queue`]) rather than joined: the two recipes would not exclude each
//! other.

pub(crate) mod nodes;
pub(crate) mod owners;
pub(crate) mod queue;
pub(crate) mod semaphore;

use lock_core::LockName;

use crate::names::encode_segment;

/// The znode of name `name` under `base` (the namespace takes no part).
pub(crate) fn object_path(base: &str, name: &LockName) -> String {
    let mut path = base.to_owned();
    for segment in name.key().segments() {
        path.push('/');
        path.push_str(&encode_segment(segment));
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_live_under_the_base_without_their_namespace() {
        let name = LockName::parse("ns", "locks/orders").unwrap();
        assert_eq!(object_path("", &name), "/locks/orders");
        assert_eq!(object_path("/svc", &name), "/svc/locks/orders");
        let other = LockName::parse("other", "locks/orders").unwrap();
        assert_eq!(object_path("", &other), "/locks/orders");
        let escaped = LockName::parse("ns", "_c_x/%").unwrap();
        assert_eq!(object_path("", &escaped), "/%5Fc_x/%25");
    }
}
