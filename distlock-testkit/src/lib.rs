#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod child;
mod cleanup;
pub mod curator;
pub mod data_root;
pub mod etcd;
pub mod etcdctl;
pub mod fencing;
pub mod kazoo;
pub mod layout;
pub mod pausable;
pub mod pg_standby;
pub mod pgbouncer;
#[cfg(feature = "tls")]
pub mod pki;
pub mod ports;
pub mod postgres;
pub mod probe;
mod procfs;
pub mod programs;
pub mod proxy;
pub mod recipe_peer;
pub mod redis;
pub mod redis_sentinel;
pub mod refusals;
pub mod scenarios;
pub mod server;
mod server_log;
pub mod shared;
pub mod signals;
pub mod spawner;
pub mod spec;
pub mod states;
pub mod store_config;
pub mod unprivileged;
pub mod url;
pub mod wait;
pub mod workload;
pub mod zookeeper;

pub use data_root::{data_root, keep_data_on_disk};
pub use fencing::{FencedResource, StaleToken};
pub use pausable::{Pausable, Restartable};
pub use ports::{free_port, free_ports};
pub use probe::ProbeFuture;
pub use programs::{
    env_override, find_program, install_hint, ETCD_URL_VAR, PG_URL_VAR, REDIS_URL_VAR, ZK_URL_VAR,
};
pub use proxy::FaultProxy;
pub use server::Server;
pub use shared::shared_server;
pub use signals::{pause_group, resume_group, signal_group};
pub use spawner::{spawn_child, spawn_child_blocking, this_binary_running};
pub use spec::{InitFuture, ServerContext, ServerSpec, DEFAULT_READY_TIMEOUT};
pub use states::{assert_lost, next_state, next_states};
pub use unprivileged::RunAs;
pub use url::{loopback_hosts, replace_hosts, url_hosts, with_query};
pub use wait::{assert_not_before, eventually, Check};
