//! The store's own scripts and key names for an exclusive lock on one
//! server, for tools that send them with the plain client library: a
//! benchmark, say, that measures what Redis itself charges for a lock
//! with no distlock code on the path. The store runs the same scripts
//! (by `EVALSHA`, loaded ahead) on the same names; the crate docs (*How
//! it works*) say what they do. Connections set up as the store's own
//! come from [`RedisConfig::connection_manager`](crate::RedisConfig::connection_manager).

use lock_core::LockName;
use redis::Script;

use crate::counter::Counters;
use crate::keys::LockKeys;
use crate::scripts::scripts;

/// The script that takes an exclusive lock or joins its line, with the
/// helpers every script shares in front, as the store loads it (same
/// text, so the same hash). KEYS: the seven names of [`lock_keys`].
/// ARGV: the owner id, the lease in ms, the queue mode (`0`: never
/// queue), how long a place in line lives unrenewed in ms, the channel
/// the owner hears hand-offs on, the value to store (`""`: none). Reply:
/// `{1, token}` when taken, `{0, pttl, holder's token}` when held by
/// another.
pub fn acquire_script() -> &'static Script {
    &scripts().acquire
}

/// The script that gives back an exclusive or read hold and lets the
/// front of the line in, as the store loads it. KEYS: the seven names of
/// [`lock_keys`]. ARGV: the owner id, then `0`. Reply: 1 if the hold was
/// ours and is released, 0 if not (the lock is left alone).
pub fn release_script() -> &'static Script {
    &scripts().release_queued
}

/// The names [`acquire_script`] and [`release_script`] take as KEYS for
/// the lock `name` on one server or a Sentinel master, in order: the
/// lock, its namespace's fencing counter, the watchers' marker, the
/// line, its waiters' entries, the readers and the readers' values.
pub fn lock_keys(name: &LockName) -> [String; 7] {
    LockKeys::new(name, Counters::PerNamespace)
        .with_readers()
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_of_a_lock_on_one_server_in_the_scripts_order() {
        let name = LockName::parse("raw-1", "k7").unwrap();
        assert_eq!(
            lock_keys(&name),
            [
                "distlock:{raw-1:k7}",
                "distlock:{raw-1:}:token",
                "distlock:{raw-1:k7}:watched",
                "distlock:{raw-1:k7}:queue",
                "distlock:{raw-1:k7}:waiters",
                "distlock:{raw-1:k7}:readers",
                "distlock:{raw-1:k7}:readvalues",
            ]
        );
    }

    #[test]
    fn the_scripts_are_their_files_behind_the_shared_helpers() {
        let text = |body: &str| format!("{}\n{body}", include_str!("scripts/common.lua"));
        let acquire = Script::new(&text(include_str!("scripts/acquire.lua")));
        let release = Script::new(&text(include_str!("scripts/release_queued.lua")));
        assert_eq!(acquire_script().get_hash(), acquire.get_hash());
        assert_eq!(release_script().get_hash(), release.get_hash());
    }
}
