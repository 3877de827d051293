//! The client's own work per uncontended lock+release on Redis or etcd,
//! for counting instructions with callgrind (counts do not depend on what
//! else the machine does, unlike times):
//!
//! ```sh
//! cargo build --release -p distlock-cli --features etcd --example client_instructions
//! for mode in ours raw; do for n in 0 2000; do
//!   valgrind --tool=callgrind --callgrind-out-file=cg.$mode.$n \
//!     target/release/examples/client_instructions "redis://127.0.0.1:6379?ttl=10s" $mode $n
//! done; done
//! ```
//!
//! `(total(n) - total(0)) / n` is the client's instructions per
//! operation: `ours` takes and releases one lock through distlock, `raw`
//! sends the store's floor on a connection set up as the store's (Redis:
//! `SET key v NX PX` and `DEL key`; etcd: a put-if-absent transaction and
//! a delete). One current-thread runtime, so no work hops between
//! threads.

use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, mode, n] = args.as_slice() else {
        eprintln!("usage: client_instructions REDIS_OR_ETCD_URL ours|raw N");
        std::process::exit(2);
    };
    let n: u32 = n.parse().expect("N is a count");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let locker = distlock::connect(url).await.expect("connect");
        let mut raw = Raw::open(url).await;
        let started = Instant::now();
        for _ in 0..n {
            if mode == "ours" {
                let guard = locker.lock("instructions").await.expect("lock");
                guard.release().await.expect("release");
            } else {
                raw.lock_release().await;
            }
        }
        eprintln!("{mode}: {:?} per operation", started.elapsed() / n.max(1));
    });
}

/// The floor's two requests, on a connection set up as the store's.
enum Raw {
    Redis(redis::aio::ConnectionManager),
    #[cfg(feature = "etcd")]
    Etcd(Box<etcd_client::KvClient>),
}

impl Raw {
    async fn open(url: &str) -> Self {
        #[cfg(feature = "etcd")]
        if url.starts_with("etcd") {
            let config = lock_core::open::parse::<lock_etcd::EtcdStore>(url)
                .expect("an etcd URL")
                .config;
            let client = config.connect().await.expect("an etcd client");
            return Self::Etcd(Box::new(client.kv_client()));
        }
        let config = lock_core::open::parse::<lock_redis::RedisStore>(url)
            .expect("a Redis URL (or an etcd URL with the etcd feature)")
            .config;
        let raw = config
            .connection_manager(&config.nodes[0])
            .expect("a raw connection");
        Self::Redis(raw)
    }

    async fn lock_release(&mut self) {
        const KEY: &str = "instructions-raw";
        match self {
            Self::Redis(raw) => {
                let _: Option<String> = redis::cmd("SET")
                    .arg(KEY)
                    .arg("v")
                    .arg("NX")
                    .arg("PX")
                    .arg(10_000)
                    .query_async(raw)
                    .await
                    .expect("SET");
                let _: i64 = redis::cmd("DEL")
                    .arg(KEY)
                    .query_async(raw)
                    .await
                    .expect("DEL");
            }
            #[cfg(feature = "etcd")]
            Self::Etcd(kv) => {
                use etcd_client::{Compare, CompareOp, Txn, TxnOp};
                let txn = Txn::new()
                    .when([Compare::create_revision(KEY, CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(KEY, "v", None)]);
                kv.txn(txn).await.expect("put-if-absent");
                kv.delete(KEY, None).await.expect("delete");
            }
        }
    }
}
