//! distlock's descendants, read from `/proc` (Linux), and the subreaper
//! setting that keeps them in distlock's tree.

use std::collections::HashMap;
use std::io;

/// One descendant of distlock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Process {
    pub(super) pid: libc::pid_t,
    /// Its process group.
    pub(super) group: libc::pid_t,
    /// Its command name (`comm`).
    pub(super) name: String,
    /// Its state letter (`R`, `S`, `Z`, ...).
    state: char,
}

impl Process {
    /// Ended, waiting to be reaped.
    pub(super) fn is_zombie(&self) -> bool {
        self.state == 'Z'
    }
}

/// Makes distlock the child subreaper of its descendants (Linux): an
/// orphan of the job is handed to distlock instead of to init.
pub(super) fn become_subreaper() -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with these arguments only sets a process flag.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Every descendant of distlock now, each after its parent;
/// empty where `/proc` cannot be read (not Linux).
pub(super) fn descendants() -> Vec<Process> {
    let mut children: HashMap<libc::pid_t, Vec<Process>> = HashMap::new();
    for (process, ppid) in processes() {
        children.entry(ppid).or_default().push(process);
    }
    let mut found = Vec::new();
    let mut parents = vec![libc::pid_t::try_from(std::process::id()).unwrap_or(0)];
    while let Some(parent) = parents.pop() {
        for process in children.remove(&parent).unwrap_or_default() {
            parents.push(process.pid);
            found.push(process);
        }
    }
    found
}

/// Every process with its parent's pid, as `/proc` lists them.
fn processes() -> Vec<(Process, libc::pid_t)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let pid: libc::pid_t = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            parse_stat(pid, &stat)
        })
        .collect()
}

/// Reads `pid (comm) S ppid pgrp ...`; the name may hold spaces and
/// parentheses, so it ends at the last `)`.
fn parse_stat(pid: libc::pid_t, stat: &str) -> Option<(Process, libc::pid_t)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_owned();
    let mut fields = stat.get(close + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let group = fields.next()?.parse().ok()?;
    Some((
        Process {
            pid,
            group,
            name,
            state,
        },
        ppid,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let (process, ppid) = parse_stat(42, "42 (a) b (c)) S 7 42 42 0 -1").unwrap();
        assert_eq!((process.name.as_str(), process.state), ("a) b (c)", 'S'));
        assert_eq!((ppid, process.group), (7, 42));
        assert!(parse_stat(1, "1 (x").is_none());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_child_is_a_descendant() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        let found = descendants().into_iter().any(|p| p.pid == pid);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(found, "the child {pid} is not among the descendants");
    }
}
