//! The stores seen from outside distlock, with raw clients, where the
//! testkit's `layout` says their locks are:
//!
//! - queue order on the stores whose waiters form a FIFO queue (Redis,
//!   Redis Cluster, etcd, ZooKeeper, PostgreSQL): waiters give up in the middle of the
//!   queue, and the others are handed the lock one at a time, in queue
//!   order (see `conformance_tests::queue`);
//! - the layout itself: a lock on a key with braces, `%`, levels,
//!   non-ASCII or dot-only levels is found where the layout says, and is
//!   gone from there after its release.

use std::future::Future;

use conformance_tests::queue::{check_queue, Shape, QUEUE_KEY};
use distlock::{LockName, Locker};

/// Keys every store encodes in its own way.
const ODD_KEYS: [&str; 7] = [
    "plain", "a}b{c", "100%/%7D", "x/y/z", "é x", "../.", "_locks",
];

/// Opens lockers on `url`.
async fn connect(url: &str) -> Locker {
    distlock::connect(url).await.unwrap()
}

/// Takes and releases each of [`ODD_KEYS`] with `locker`, asserting that
/// `seen_held(name)`, a look from outside, finds the lock while it is held
/// and not after its release.
async fn check_layout<F, Fut>(locker: &Locker, seen_held: F)
where
    F: Fn(LockName) -> Fut,
    Fut: Future<Output = bool>,
{
    for key in ODD_KEYS {
        let name = locker.name(key).unwrap();
        let guard = locker.lock(key).await.unwrap();
        let held = seen_held(name.clone()).await;
        assert!(held, "{key}: not found where the layout says");
        guard.release().await.unwrap();
        let gone = !seen_held(name).await;
        assert!(gone, "{key}: still there after its release");
    }
}

/// Runs the queue check on lockers from `url`, reading the line with the
/// raw connection `raw` (to a single instance or a cluster).
async fn check_redis<C>(url: &str, raw: C, shape: Shape)
where
    C: ::redis::aio::ConnectionLike + Clone + Send,
{
    use distlock_testkit::redis::waiters_in_line;

    let queued = |holder: Locker| {
        let mut raw = raw.clone();
        async move {
            let name = holder.name(QUEUE_KEY).unwrap();
            waiters_in_line(&mut raw, &name).await.unwrap()
        }
    };
    check_queue(|| connect(url), queued, shape).await;
}

mod redis {
    use super::*;
    use distlock_testkit::layout::RedisKeys;
    use distlock_testkit::redis::shared_redis_url;
    use distlock_testkit::with_query;

    /// A raw connection to the server at `url`.
    async fn raw_redis(url: &str) -> ::redis::aio::MultiplexedConnection {
        let client = ::redis::Client::open(url).unwrap();
        client.get_multiplexed_async_connection().await.unwrap()
    }

    async fn check(namespace: &str, shape: Shape) {
        let base = shared_redis_url().await.unwrap();
        let url = with_query(&base, &format!("ttl=10s&namespace={namespace}"));
        let raw = raw_redis(&base).await;
        check_redis(&url, raw, shape).await;
    }

    conformance_tests::queue_order_tests!("redisq", check);

    #[tokio::test]
    async fn the_layout_finds_the_lock_key() {
        let base = shared_redis_url().await.unwrap();
        let locker = connect(&with_query(&base, "namespace=layout&ttl=10s")).await;
        let raw = raw_redis(&base).await;
        check_layout(&locker, |name| {
            let mut raw = raw.clone();
            async move {
                let lock = RedisKeys::of(&name).lock;
                let found: i64 = ::redis::cmd("EXISTS")
                    .arg(&lock)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                found == 1
            }
        })
        .await;
    }
}

/// On a cluster too: the line lives with the lock on its master.
mod redis_cluster {
    use super::*;
    use distlock_testkit::redis::shared_cluster_url;
    use distlock_testkit::url_hosts;

    async fn check(namespace: &str, shape: Shape) {
        let base = shared_cluster_url().await.unwrap();
        let url = format!("{base}?ttl=10s&namespace={namespace}");
        let nodes: Vec<String> = url_hosts(&base)
            .into_iter()
            .map(|host| format!("redis://{host}"))
            .collect();
        let raw = ::redis::cluster::ClusterClient::new(nodes)
            .unwrap()
            .get_async_connection()
            .await
            .unwrap();
        check_redis(&url, raw, shape).await;
    }

    conformance_tests::queue_order_tests!("clusterq", check);
}

mod etcd {
    use super::*;
    use distlock_testkit::etcd::{holder_entry, raw_client, shared_etcd_url};
    use distlock_testkit::layout::etcd_queue_prefix;
    use distlock_testkit::with_query;

    async fn check(namespace: &str, shape: Shape) {
        let url = shared_etcd_url().await.expect("etcd test server");
        let url = with_query(&url, &format!("namespace={namespace}&ttl=10s"));
        let raw = raw_client(&url).await.unwrap();
        let queued = |holder: Locker| {
            let mut kv = raw.kv_client();
            async move {
                let prefix = etcd_queue_prefix(&holder.name(QUEUE_KEY).unwrap());
                let keys = etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_keys_only();
                let response = kv.get(prefix, Some(keys)).await.unwrap();
                response
                    .kvs()
                    .iter()
                    .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
                    .collect()
            }
        };
        check_queue(|| connect(&url), queued, shape).await;
    }

    conformance_tests::queue_order_tests!("etcdq", check);

    #[tokio::test]
    async fn the_layout_finds_the_holders_entry() {
        let url = shared_etcd_url().await.expect("etcd test server");
        let locker = connect(&with_query(&url, "namespace=layout&ttl=10s")).await;
        let raw = raw_client(&url).await.unwrap();
        check_layout(&locker, |name| {
            let raw = raw.clone();
            async move { holder_entry(&raw, &name).await.unwrap().is_some() }
        })
        .await;
    }
}

mod zookeeper {
    use super::*;
    use distlock_testkit::layout::{zk_contenders, zk_lock_dir};
    use distlock_testkit::zookeeper::{raw_client, shared_standalone, zk_url};

    const BASE: &str = "/queue";

    /// The children of `dir`; none if it does not exist.
    async fn children(raw: &zookeeper_client::Client, dir: &str) -> Vec<String> {
        match raw.list_children(dir).await {
            Ok(children) => children,
            Err(zookeeper_client::Error::NoNode) => Vec::new(),
            Err(e) => panic!("list {dir}: {e}"),
        }
    }

    async fn check(namespace: &str, shape: Shape) {
        let addrs = shared_standalone().await.unwrap_or_else(|e| panic!("{e}"));
        let url = zk_url(&addrs, BASE, &format!("ttl=10s&namespace={namespace}"));
        let raw = raw_client(&addrs).await.unwrap();
        let queued = |holder: Locker| {
            let raw = raw.clone();
            async move {
                let dir = zk_lock_dir(BASE, &holder.name(QUEUE_KEY).unwrap());
                children(&raw, &dir).await
            }
        };
        check_queue(|| connect(&url), queued, shape).await;
    }

    conformance_tests::queue_order_tests!("zkq", check);

    #[tokio::test]
    async fn the_layout_finds_the_holders_node() {
        let addrs = shared_standalone().await.unwrap_or_else(|e| panic!("{e}"));
        let locker = connect(&zk_url(&addrs, BASE, "namespace=layout&ttl=10s")).await;
        let raw = raw_client(&addrs).await.unwrap();
        check_layout(&locker, |name| {
            let raw = raw.clone();
            async move {
                let listed = children(&raw, &zk_lock_dir(BASE, &name)).await;
                zk_contenders(&listed).len() == 1
            }
        })
        .await;
    }
}

mod postgres {
    use super::*;
    use std::sync::Arc;

    use distlock_testkit::postgres::shared_postgres_url;
    use distlock_testkit::with_query;
    use tokio_postgres::{Client, NoTls};

    /// A raw connection to the server of `url` (options stripped).
    async fn raw_client(url: &str) -> Arc<Client> {
        let server = url.split('?').next().unwrap_or(url);
        let (client, connection) = tokio_postgres::connect(server, NoTls).await.unwrap();
        tokio::spawn(connection);
        Arc::new(client)
    }

    /// The ids of `name`'s entries, the holder's and the waiters', in
    /// queue order, from the store's table in its default schema.
    async fn entries(raw: &Client, name: &LockName) -> Vec<String> {
        let rows = raw
            .query(
                "SELECT id::text FROM distlock.entries \
                 WHERE namespace = $1 AND key = $2 ORDER BY id",
                &[&name.namespace().as_str(), &name.key().as_str()],
            )
            .await
            .unwrap();
        rows.iter().map(|row| row.get(0)).collect()
    }

    async fn check(namespace: &str, shape: Shape) {
        let base = shared_postgres_url().await.expect("PostgreSQL test server");
        let url = with_query(&base, &format!("ttl=10s&namespace={namespace}"));
        let raw = raw_client(&base).await;
        let queued = |holder: Locker| {
            let raw = Arc::clone(&raw);
            async move { entries(&raw, &holder.name(QUEUE_KEY).unwrap()).await }
        };
        check_queue(|| connect(&url), queued, shape).await;
    }

    conformance_tests::queue_order_tests!("pgq", check);

    #[tokio::test]
    async fn the_layout_finds_the_holders_entry() {
        let base = shared_postgres_url().await.expect("PostgreSQL test server");
        let locker = connect(&with_query(&base, "namespace=layout&ttl=10s")).await;
        let raw = raw_client(&base).await;
        check_layout(&locker, |name| {
            let raw = Arc::clone(&raw);
            async move { entries(&raw, &name).await.len() == 1 }
        })
        .await;
    }
}
