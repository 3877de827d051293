//! Tools for tests that run against real servers and real faults.
//!
//! - [`ServerSpec`] / [`Server`]: start a server program on free loopback
//!   ports with a temp data dir, wait until it answers, kill, pause,
//!   restart it; [`shared_server`] shares one per test binary.
//! - [`data_root()`]: where servers keep their data (in memory when
//!   `/dev/shm` has room, so a nearly full disk cannot stop them).
//! - [`spawn_child`]: fork any child process (e.g. a lock holder to
//!   `SIGKILL`) so that it never outlives the test process;
//!   [`pause_group`] / [`signal_group`] signal its process group.
//! - [`find_program`] / [`env_override`]: locate server binaries, or use a
//!   running server named by `DISTLOCK_TEST_*_URL`.
//! - [`FaultProxy`]: cut, blackhole or slow down a TCP connection.
//! - [`FencedResource`]: a resource that rejects stale fencing tokens.
//! - [`eventually`]: wait for an asynchronous condition in an assertion.

mod cleanup;
pub mod data_root;
pub mod fencing;
pub mod ports;
pub mod probe;
mod procfs;
pub mod programs;
pub mod proxy;
pub mod server;
pub mod shared;
pub mod signals;
pub mod spawner;
pub mod spec;
pub mod wait;

pub use data_root::{data_root, keep_data_on_disk};
pub use fencing::{FencedResource, StaleToken};
pub use ports::{free_port, free_ports};
pub use probe::ProbeFuture;
pub use programs::{
    env_override, find_program, install_hint, ETCD_URL_VAR, REDIS_URL_VAR, ZK_URL_VAR,
};
pub use proxy::FaultProxy;
pub use server::Server;
pub use shared::shared_server;
pub use signals::{pause_group, resume_group, signal_group};
pub use spawner::{spawn_child, spawn_child_blocking};
pub use spec::{ServerContext, ServerSpec, DEFAULT_READY_TIMEOUT};
pub use wait::{eventually, Check};
