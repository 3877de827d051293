//! The conformance suite against Redlock over five independent
//! `redis-server` masters shared by the cases of this binary. The outage
//! case puts a fault proxy in front of every master and cuts them all.

use conformance_tests::redis::{redlock_url, shared_redlock_servers, RedisFactory};

async fn redlock_factory() -> RedisFactory {
    let masters = shared_redlock_servers(5).await.expect("five Redis masters");
    let addrs: Vec<_> = masters.iter().map(|s| s.addr()).collect();
    RedisFactory {
        base: redlock_url(addrs.iter().copied()),
        proxied: Some(("redlock", addrs)),
    }
}

lock_core::conformance_tests!(redlock, redlock_factory);
