//! What `/proc` tells about a server's process group. Linux only.
//!
//! - Who listens on a port: a readiness probe only shows that *something*
//!   answers on the port. If another process took the port before our
//!   server bound it, the probe talks to that process while our server
//!   fails to bind. So before a server counts as ready, the listener on its
//!   main port must belong to its process group.
//! - Whether the group is stopped: `SIGSTOP` takes effect asynchronously.
//!   In a multi-threaded process one thread starts the group stop and the
//!   others stop when they next get the CPU, so right after `kill` a thread
//!   woken by incoming data may still answer it.

use std::collections::HashSet;
use std::fs;

/// Who holds the listening socket(s) on a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PortOwner {
    /// Nothing listens on the port (or `/proc` could not tell).
    Nobody,
    /// A process of the given process group listens on it.
    Group,
    /// Only processes outside the group listen on it.
    Other,
}

/// Who listens on TCP `port` (IPv4 or IPv6, any address): the process
/// group `group` or somebody else.
pub(crate) fn port_owner(port: u16, group: u32) -> PortOwner {
    let listeners = listening_inodes(port);
    if listeners.is_empty() {
        return PortOwner::Nobody;
    }
    let ours = group_members(group).into_iter().any(|pid| {
        socket_inodes(pid)
            .iter()
            .any(|inode| listeners.contains(inode))
    });
    if ours {
        PortOwner::Group
    } else {
        PortOwner::Other
    }
}

/// Socket inodes in state LISTEN on local `port`, from `/proc/net/tcp*`.
fn listening_inodes(port: u16) -> HashSet<u64> {
    const LISTEN: &str = "0A";
    let mut inodes = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = fs::read_to_string(table) else {
            continue;
        };
        // Columns: sl local_address rem_address st ... uid timeout inode
        for fields in text
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
        {
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let local_port = local
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if *state == LISTEN && local_port == Some(port) {
                inodes.extend(inode.parse::<u64>());
            }
        }
    }
    inodes
}

/// Whether every thread of every process in `group` is stopped (or dead).
pub(crate) fn group_stopped(group: u32) -> bool {
    group_members(group).into_iter().all(|pid| {
        let Ok(threads) = fs::read_dir(format!("/proc/{pid}/task")) else {
            return true; // gone
        };
        threads.filter_map(|t| t.ok()).all(|thread| {
            let state = fs::read_to_string(thread.path().join("stat"))
                .ok()
                .and_then(|stat| {
                    stat.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .next()
                        .map(str::to_owned)
                });
            // T: stopped, t: traced, Z/X: dead; None: the thread is gone.
            matches!(state.as_deref(), None | Some("T" | "t" | "Z" | "X"))
        })
    })
}

/// Pids of the processes in process group `group`, from `/proc/*/stat`.
fn group_members(group: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| process_group_of(*pid) == Some(group))
        .collect()
}

/// The process group of `pid`: the 3rd field after the `(command)` in
/// `/proc/<pid>/stat` (state, ppid, pgrp).
fn process_group_of(pid: u32) -> Option<u32> {
    stat_field(pid, 2)?.parse().ok()
}

/// Field `n` (0: state, 1: ppid, 2: pgrp, ...) after the `(command)` in
/// `/proc/<pid>/stat`, `None` if the process is gone.
fn stat_field(pid: u32, n: usize) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_command = stat.rsplit_once(')')?.1;
    after_command.split_whitespace().nth(n).map(str::to_owned)
}

/// Pids of the processes whose parent is `pid`, whatever their group.
pub(crate) fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parent = pid.to_string();
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| stat_field(*child, 1).as_deref() == Some(parent.as_str()))
        .collect()
}

/// Whether process `pid` is gone: no longer in `/proc`, or a zombie (it
/// runs no code and holds no memory; PID 1 of a container may never reap
/// it).
pub(crate) fn process_gone(pid: u32) -> bool {
    matches!(stat_field(pid, 0).as_deref(), None | Some("Z" | "X"))
}

/// Inodes of the sockets `pid` has open, from `/proc/<pid>/fd`.
fn socket_inodes(pid: u32) -> HashSet<u64> {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    fds.filter_map(|fd| {
        let target = fs::read_link(fd.ok()?.path()).ok()?;
        let target = target.to_str()?;
        target
            .strip_prefix("socket:[")?
            .strip_suffix(']')?
            .parse()
            .ok()
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_listed_until_it_is_gone() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("run sleep");
        assert!(children_of(std::process::id()).contains(&child.id()));
        assert!(!process_gone(child.id()));
        child.kill().expect("kill sleep");
        child.wait().expect("reap sleep");
        assert!(process_gone(child.id()));
        assert!(!children_of(std::process::id()).contains(&child.id()));
    }
}
