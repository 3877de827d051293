//! Free loopback ports for spawned servers.
//!
//! Ports are picked at random *below* the kernel's ephemeral range
//! (`/proc/sys/net/ipv4/ip_local_port_range`, usually from 32768 up). The
//! kernel hands out ephemeral ports for every `bind(port 0)` and every
//! outgoing connection, so an ephemeral port reserved for a server that is
//! still starting could be given meanwhile to an in-process listener (a
//! [`crate::FaultProxy`], a test's own server) or a client, and
//! the readiness probe would then talk to the wrong listener. Below the
//! range only someone binding that port explicitly can collide.
//!
//! A port is checked free by binding it; the listener is closed before the
//! server binds the port itself, so another process can still take it in
//! between: [`crate::Server::start`] retries with fresh ports
//! then. Within this process a port is never handed out twice.

use std::collections::HashSet;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::ops::Range;
use std::sync::{Mutex, OnceLock};

/// Lowest port handed out: leaves the well-known and common fixed ports
/// (redis 6379, etcd 2379, ZooKeeper 2181, ...) alone.
const LOWEST: u16 = 10_000;
/// Random candidates tried per port before falling back to the kernel.
const ATTEMPTS: usize = 200;

/// Ports handed out by this process so far.
fn handed_out() -> &'static Mutex<HashSet<u16>> {
    static PORTS: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    PORTS.get_or_init(Default::default)
}

/// Returns `n` distinct free TCP ports on 127.0.0.1 that this process has
/// not handed out before.
pub fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    // Poisoning only means another test panicked while holding the lock;
    // the set itself is still valid.
    let mut seen = handed_out().lock().unwrap_or_else(|e| e.into_inner());
    let mut ports = Vec::with_capacity(n);
    while ports.len() < n {
        let port = match candidate_range() {
            Some(range) => random_free_port(range, &seen).or_else(|_| kernel_port(&seen))?,
            None => kernel_port(&seen)?,
        };
        seen.insert(port);
        ports.push(port);
    }
    Ok(ports)
}

/// Returns one free TCP port on 127.0.0.1; see [`free_ports`].
pub fn free_port() -> io::Result<u16> {
    Ok(free_ports(1)?[0])
}

/// The ports between [`LOWEST`] and the start of the ephemeral range, or
/// `None` if that leaves too few.
fn candidate_range() -> Option<Range<u16>> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok();
    let ephemeral_start = text
        .as_deref()
        .and_then(|t| t.split_whitespace().next())
        .and_then(|first| first.parse::<u16>().ok())
        .unwrap_or(32_768);
    (ephemeral_start >= LOWEST + 2_000).then_some(LOWEST..ephemeral_start)
}

/// A random port of `range` that is free and not in `seen`.
fn random_free_port(range: Range<u16>, seen: &HashSet<u16>) -> io::Result<u16> {
    for _ in 0..ATTEMPTS {
        let port = fastrand::u16(range.clone());
        if !seen.contains(&port) && is_free(port) {
            return Ok(port);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrNotAvailable,
        "no free port found below the ephemeral range",
    ))
}

/// Whether 127.0.0.1:`port` can be bound right now.
fn is_free(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// Fallback: an ephemeral port chosen by the kernel, not in `seen`.
fn kernel_port(seen: &HashSet<u16>) -> io::Result<u16> {
    // Rejected listeners stay open so the kernel offers other ports.
    let mut held = Vec::new();
    for _ in 0..ATTEMPTS {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        if !seen.contains(&port) {
            return Ok(port);
        }
        held.push(listener);
    }
    Err(io::Error::new(
        io::ErrorKind::AddrNotAvailable,
        "no free loopback port found that this process has not used before",
    ))
}
