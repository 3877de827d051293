//! The conformance suite against Redlock over five independent
//! `redis-server` masters shared by the cases of this binary. The outage
//! case puts a fault proxy in front of every master and cuts them all.

use conformance_tests::StoreFactory;
use distlock_testkit::redis::{redlock_url, shared_redlock_servers, TEST_TIMEOUTS};
use distlock_testkit::with_query;

async fn redlock_factory() -> StoreFactory {
    let masters = shared_redlock_servers(5).await.expect("five Redis masters");
    let addrs: Vec<_> = masters.iter().map(|s| s.addr()).collect();
    let base = redlock_url(addrs.iter().copied());
    StoreFactory::new(with_query(&base, TEST_TIMEOUTS)).outage_through(addrs)
}

lock_core::conformance_tests!(redlock, redlock_factory);
