//! Injects one fault into a running deployment and heals it.

use std::time::Duration;

use distlock_testkit::{pause_group, resume_group, FaultProxy};
use tokio::time::{sleep, Instant};

use crate::deployment::{Deployment, Topology};
use crate::faults::Fault;
use crate::fleet::Fleet;
use crate::register::{ClientId, Register};

/// How long a Redis Cluster master stays down: past its node timeout
/// (5 s), so that a replica takes over.
const CLUSTER_FAILOVER_WAIT: Duration = Duration::from_secs(8);

/// How long a Redis Sentinel master stays down at least: long enough for
/// the sentinels to agree it is down (1 s) and promote its replica.
const SENTINEL_FAILOVER_WAIT: Duration = Duration::from_secs(4);

/// How long a client process's last reports may take to reach the
/// register once the process is stopped (they travel over a local
/// socket): after this, the register's view of what it holds is final.
const REPORTS_SETTLE: Duration = Duration::from_millis(100);

/// Everything a fault acts on.
#[derive(Debug)]
pub struct Nemesis<'a> {
    /// The servers.
    pub deployment: &'a Deployment,
    /// The client processes.
    pub fleet: &'a mut Fleet,
    /// Who holds what.
    pub register: &'a Register,
    /// The proxies of the runner's own client tasks.
    pub task_proxies: &'a [FaultProxy],
    /// The lease.
    pub ttl: Duration,
}

impl Nemesis<'_> {
    /// Injects `fault` and heals it; `Ok(false)` when it could not hit
    /// the target it is meant for (no client process still held a lock
    /// when it was frozen, killed or cut off; no leader found; no standby
    /// left to fail over to). Such a miss is not counted as injected.
    pub async fn inject(&mut self, fault: Fault) -> Result<bool, String> {
        match fault {
            Fault::HolderPause => self.freeze_holder().await,
            Fault::HolderKill => self.kill_holder().await,
            Fault::ServerKill => self.kill_server().await.map(|()| true),
            Fault::ServerPause => self.freeze_server().await.map(|()| true),
            Fault::Partition => self.cut_off_holder().await,
            Fault::Latency => self.slow_down().await.map(|()| true),
            Fault::MemberKill if self.deployment.topology == Topology::PgSyncStandby => {
                self.fail_over().await
            }
            Fault::MemberKill => self.kill_leader().await,
        }
    }

    /// Kills the primary and promotes its standby, once per run;
    /// `Ok(false)` after that (nothing left to fail over to).
    async fn fail_over(&self) -> Result<bool, String> {
        let done = self.deployment.fail_over().await?;
        if done {
            self.register
                .note("failover: primary killed, standby promoted");
            sleep(self.past_ttl()).await;
        }
        Ok(done)
    }

    /// Long enough for a lease to run out: two ttls.
    fn past_ttl(&self) -> Duration {
        self.ttl * 2
    }

    /// Freezes a client process holding a lock past its lease, then lets
    /// it run again; `Ok(false)` when it had released everything by the
    /// time it stopped (resumed at once).
    async fn freeze_holder(&self) -> Result<bool, String> {
        let Some(index) = self.a_holder().await else {
            return Ok(false);
        };
        let pid = self.fleet.members[index].pid();
        let id = self.fleet.members[index].id;
        pause_group(pid).await?;
        let hit = self.still_holds(id).await;
        if hit {
            self.register.note(&format!("client {id} frozen"));
            sleep(self.past_ttl()).await;
        }
        resume_group(pid).map_err(|e| format!("SIGCONT: {e}"))?;
        if hit {
            self.register.note(&format!("client {id} resumed"));
        }
        Ok(hit)
    }

    /// Kills a client process holding a lock, and starts another in its
    /// place; `Ok(false)` when it had released everything by the time it
    /// died.
    async fn kill_holder(&mut self) -> Result<bool, String> {
        let Some(index) = self.a_holder().await else {
            return Ok(false);
        };
        let id = self.fleet.kill(index);
        let hit = self.still_holds(id).await;
        self.register.gone(id);
        self.fleet.add(self.deployment).await?;
        Ok(hit)
    }

    /// Whether client `id`, just stopped or cut off, still holds a key by
    /// the register's timeline once its last reports have arrived.
    async fn still_holds(&self, id: ClientId) -> bool {
        sleep(REPORTS_SETTLE).await;
        self.register.holders().contains(&id)
    }

    /// Kills a server for half a ttl, then restarts it.
    async fn kill_server(&self) -> Result<(), String> {
        let index = self.any_server();
        let server = &self.deployment.servers[index];
        server.crash().await?;
        self.register.note(&format!("server {index} killed"));
        sleep(self.ttl / 2).await;
        server.start_again().await?;
        self.register.note(&format!("server {index} restarted"));
        Ok(())
    }

    /// Freezes a server past the lease, then lets it run again.
    async fn freeze_server(&self) -> Result<(), String> {
        let index = self.any_server();
        let server = &self.deployment.servers[index];
        server.pause().await?;
        self.register.note(&format!("server {index} frozen"));
        sleep(self.past_ttl()).await;
        server.resume()?;
        self.register.note(&format!("server {index} resumed"));
        Ok(())
    }

    /// Cuts a client process holding a lock off every server past the
    /// lease, then reconnects it; `Ok(false)` when none held in time, or
    /// the one chosen had released everything by the time it was cut off
    /// (reconnected at once).
    async fn cut_off_holder(&self) -> Result<bool, String> {
        let Some(index) = self.a_holder().await else {
            return Ok(false);
        };
        let (id, proxies) = {
            let member = &self.fleet.members[index];
            (member.id, &member.proxies)
        };
        proxies.iter().for_each(FaultProxy::blackhole);
        let hit = self.still_holds(id).await;
        if hit {
            self.register.note(&format!("client {id} cut off"));
            sleep(self.past_ttl()).await;
        }
        proxies.iter().for_each(FaultProxy::restore);
        if hit {
            self.register.note(&format!("client {id} reconnected"));
        }
        Ok(hit)
    }

    /// Adds a random latency of up to a tenth of the ttl to every
    /// client's connections, changed every twentieth of a ttl, for two
    /// ttls.
    async fn slow_down(&self) -> Result<(), String> {
        let until = Instant::now() + self.past_ttl();
        self.register.note("latency on");
        while Instant::now() < until {
            let most = self.ttl / 10;
            for proxy in self.all_proxies() {
                proxy.set_latency(most.mul_f64(fastrand::f64()));
            }
            sleep(self.ttl / 20).await;
        }
        for proxy in self.all_proxies() {
            proxy.set_latency(Duration::ZERO);
        }
        self.register.note("latency off");
        Ok(())
    }

    /// Kills the leader of the deployment (a master, on Redis) long
    /// enough for another to take over, then restarts it; `Ok(false)`
    /// when no member says it leads (an election under way).
    async fn kill_leader(&self) -> Result<bool, String> {
        let Some(index) = self.deployment.leader().await else {
            return Ok(false);
        };
        let server = &self.deployment.servers[index];
        server.crash().await?;
        self.register.note(&format!("member {index} killed"));
        let down = match self.deployment.topology {
            Topology::RedisCluster => CLUSTER_FAILOVER_WAIT,
            Topology::RedisSentinel => SENTINEL_FAILOVER_WAIT.max(self.past_ttl()),
            _ => self.past_ttl(),
        };
        sleep(down).await;
        server.start_again().await?;
        self.register.note(&format!("member {index} restarted"));
        Ok(true)
    }

    /// A client process holding a lock by the register's timeline, waited
    /// for up to a ttl.
    async fn a_holder(&self) -> Option<usize> {
        let until = Instant::now() + self.ttl;
        loop {
            let holders = self.register.holders();
            let candidates: Vec<usize> = (0..self.fleet.members.len())
                .filter(|&i| holders.contains(&self.fleet.members[i].id))
                .collect();
            if !candidates.is_empty() {
                return Some(candidates[fastrand::usize(..candidates.len())]);
            }
            if Instant::now() >= until {
                return None;
            }
            sleep(Duration::from_millis(10)).await;
        }
    }

    fn any_server(&self) -> usize {
        fastrand::usize(..self.deployment.servers.len())
    }

    fn all_proxies(&self) -> impl Iterator<Item = &FaultProxy> {
        let members = self.fleet.members.iter().flat_map(|m| m.proxies.iter());
        self.task_proxies.iter().chain(members)
    }
}
