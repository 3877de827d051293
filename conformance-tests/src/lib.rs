//! The conformance suite on every store and topology distlock supports,
//! and the checks that compare stores with each other.
//!
//! Each test binary runs `lock_core::conformance_tests!` against one store
//! (memory, files, Redis, Redis Cluster, Redlock, etcd, ZooKeeper,
//! PostgreSQL) through
//! one [`StoreFactory`], on servers the `distlock-testkit` starts. Tests of
//! a store's internals live in that store's crate.

#![deny(missing_docs)]

pub mod factory;
pub mod layout_factory;
pub mod outage;
pub mod queue;
pub mod zk_layout_factory;

pub use factory::{DeleteEtcdHolder, DeleteZkHolder, StoreFactory, TakeAway};
