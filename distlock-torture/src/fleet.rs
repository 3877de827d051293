//! The client processes of a run: each one client, behind its own fault
//! proxies, so one of them can be frozen, killed or cut off while the
//! others go on.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use distlock_testkit::{signal_group, spawn_child, FaultProxy};

use crate::deployment::Deployment;
use crate::register::ClientId;

/// How to start a client process.
#[derive(Debug, Clone)]
pub struct ClientCommand {
    /// The `distlock-torture` program (it runs `client` in the child).
    pub program: PathBuf,
    /// The register's socket.
    pub socket: PathBuf,
    /// The locks' namespace.
    pub namespace: String,
    /// The keys.
    pub keys: Vec<String>,
    /// The lease.
    pub ttl: Duration,
}

/// One client process.
#[derive(Debug)]
pub struct Member {
    /// Its client id in the register.
    pub id: ClientId,
    /// The proxies between it and each server (empty when the topology is
    /// not proxied).
    pub proxies: Vec<FaultProxy>,
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Member {
    /// Its process id, which is also its process group.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// The running client processes.
#[derive(Debug)]
pub struct Fleet {
    /// The processes, in start order.
    pub members: Vec<Member>,
    command: ClientCommand,
    next_id: ClientId,
}

impl Fleet {
    /// Starts `n` client processes with ids from `first_id` on.
    pub async fn start(
        deployment: &Deployment,
        command: ClientCommand,
        n: usize,
        first_id: ClientId,
    ) -> Result<Self, String> {
        let mut fleet = Fleet {
            members: Vec::with_capacity(n),
            command,
            next_id: first_id,
        };
        for _ in 0..n {
            fleet.add(deployment).await?;
        }
        Ok(fleet)
    }

    /// Starts one more client process.
    pub async fn add(&mut self, deployment: &Deployment) -> Result<(), String> {
        let id = self.next_id;
        self.next_id += 1;
        let proxies = proxies_for(deployment)?;
        let url = deployment.url(
            &addrs_through(deployment, &proxies),
            &self.command.namespace,
            self.command.ttl,
        );
        let mut command = Command::new(&self.command.program);
        command
            .arg("client")
            .arg("--url")
            .arg(&url)
            .arg("--socket")
            .arg(&self.command.socket)
            .arg("--id")
            .arg(id.to_string())
            .arg("--keys")
            .arg(self.command.keys.join(","))
            .arg("--ttl")
            .arg(humantime::format_duration(self.command.ttl).to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null());
        let mut child = spawn_child(command)
            .await
            .map_err(|e| format!("client process: {e}"))?;
        let stdin = child.stdin.take();
        self.members.push(Member {
            id,
            proxies,
            child,
            stdin,
        });
        Ok(())
    }

    /// Kills member `index` with `SIGKILL` and forgets it; returns its id.
    pub fn kill(&mut self, index: usize) -> ClientId {
        let mut member = self.members.remove(index);
        let _ = signal_group(member.pid(), libc::SIGKILL);
        let _ = member.child.wait();
        member.id
    }

    /// Asks every process to stop (its stdin closes): each finishes its
    /// holding, releases and exits. Waits up to `grace`, then kills the
    /// rest; returns how many had to be killed.
    pub async fn stop(&mut self, grace: Duration) -> usize {
        for member in &mut self.members {
            member.stdin = None;
        }
        let deadline = Instant::now() + grace;
        let mut killed = 0;
        for member in &mut self.members {
            while matches!(member.child.try_wait(), Ok(None)) {
                if Instant::now() >= deadline {
                    let _ = signal_group(member.child.id(), libc::SIGKILL);
                    let _ = member.child.wait();
                    killed += 1;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        killed
    }
}

/// A fresh proxy in front of each server of a proxied deployment.
pub fn proxies_for(deployment: &Deployment) -> Result<Vec<FaultProxy>, String> {
    if !deployment.topology.proxied() {
        return Ok(Vec::new());
    }
    deployment
        .client_addrs
        .iter()
        .map(|addr| FaultProxy::start(*addr))
        .collect::<io::Result<_>>()
        .map_err(|e| format!("fault proxy: {e}"))
}

/// Where a client behind `proxies` connects: the proxies, or the servers
/// themselves when there are none.
pub fn addrs_through(deployment: &Deployment, proxies: &[FaultProxy]) -> Vec<SocketAddr> {
    if proxies.is_empty() {
        deployment.client_addrs.clone()
    } else {
        proxies.iter().map(FaultProxy::addr).collect()
    }
}
