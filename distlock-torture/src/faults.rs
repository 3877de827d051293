//! The fault classes, where each applies, and where the docs promise
//! safety under it.

use std::fmt;

use serde::Serialize;

use crate::deployment::Topology;

/// One kind of fault the nemesis injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// A client process holding a lock is frozen (`SIGSTOP`) past the ttl,
    /// then resumed.
    HolderPause,
    /// A client process holding a lock is killed (`SIGKILL`); a new one
    /// takes its place.
    HolderKill,
    /// A server is killed (`SIGKILL`) and restarted on its data.
    ServerKill,
    /// A server is frozen (`SIGSTOP`) past the ttl, then resumed.
    ServerPause,
    /// A client process holding a lock is cut off from every server (its
    /// traffic blackholed) past the ttl, then reconnected.
    Partition,
    /// Every client's traffic is delayed by a jittering latency of up to
    /// a tenth of the ttl.
    Latency,
    /// The leader (etcd, ZooKeeper) or a master (Redis Cluster) is killed
    /// and kept down long enough for the others to replace it, then
    /// restarted.
    MemberKill,
}

impl Fault {
    /// Every fault class.
    pub const ALL: [Fault; 7] = [
        Fault::HolderPause,
        Fault::HolderKill,
        Fault::ServerKill,
        Fault::ServerPause,
        Fault::Partition,
        Fault::Latency,
        Fault::MemberKill,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Fault::HolderPause => "holder-pause",
            Fault::HolderKill => "holder-kill",
            Fault::ServerKill => "server-kill",
            Fault::ServerPause => "server-pause",
            Fault::Partition => "partition",
            Fault::Latency => "latency",
            Fault::MemberKill => "member-kill",
        }
    }

    /// Whether the fault can be injected into `topology`.
    pub fn applies_to(self, topology: Topology) -> bool {
        match self {
            Fault::HolderPause | Fault::HolderKill => true,
            Fault::ServerKill | Fault::ServerPause => topology.has_servers(),
            Fault::Partition | Fault::Latency => topology.proxied(),
            Fault::MemberKill => topology.replicated(),
        }
    }

    /// Whether the store's README promises mutual exclusion and rising
    /// tokens under this fault. Where it does not (a restart without
    /// persistence, a failover to an asynchronous replica), a run must
    /// show the violation rather than hide it.
    pub fn documented_safe(self, topology: Topology) -> bool {
        !matches!(
            (topology, self),
            (Topology::RedisSingle, Fault::ServerKill)
                | (Topology::Redlock, Fault::ServerKill)
                | (
                    Topology::RedisCluster,
                    Fault::ServerKill | Fault::MemberKill
                )
                | (
                    Topology::RedisSentinel,
                    Fault::ServerKill | Fault::ServerPause | Fault::MemberKill
                )
        )
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
