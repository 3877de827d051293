//! The client's own work per uncontended lock+release on Redis, for
//! counting instructions with callgrind (counts do not depend on what
//! else the machine does, unlike times):
//!
//! ```sh
//! cargo build --release -p distlock-cli --example client_instructions
//! for mode in ours raw; do for n in 0 2000; do
//!   valgrind --tool=callgrind --callgrind-out-file=cg.$mode.$n \
//!     target/release/examples/client_instructions "redis://127.0.0.1:6379?ttl=10s" $mode $n
//! done; done
//! ```
//!
//! `(total(n) - total(0)) / n` is the client's instructions per
//! operation: `ours` takes and releases one lock through distlock, `raw`
//! sends the floor's `SET key v NX PX` and `DEL key` on a connection set
//! up as the store's. One current-thread runtime, so no work hops between
//! threads.

use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, mode, n] = args.as_slice() else {
        eprintln!("usage: client_instructions REDIS_URL ours|raw N");
        std::process::exit(2);
    };
    let n: u32 = n.parse().expect("N is a count");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let locker = distlock::connect(url).await.expect("connect");
        let config = lock_core::url::parse::<lock_redis::RedisStore>(url)
            .expect("a Redis URL")
            .config;
        let mut raw = config
            .connection_manager(&config.nodes[0])
            .expect("a raw connection");
        let started = Instant::now();
        for _ in 0..n {
            if mode == "ours" {
                let guard = locker.lock("instructions").await.expect("lock");
                guard.release().await.expect("release");
            } else {
                let _: Option<String> = redis::cmd("SET")
                    .arg("instructions-raw")
                    .arg("v")
                    .arg("NX")
                    .arg("PX")
                    .arg(10_000)
                    .query_async(&mut raw)
                    .await
                    .expect("SET");
                let _: i64 = redis::cmd("DEL")
                    .arg("instructions-raw")
                    .query_async(&mut raw)
                    .await
                    .expect("DEL");
            }
        }
        eprintln!("{mode}: {:?} per operation", started.elapsed() / n.max(1));
    });
}
