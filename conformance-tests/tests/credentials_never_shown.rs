//! A password in a store's URL never shows: not in any log line (every
//! target, at `trace`, the client libraries' own logs included), not in
//! the `Debug` of a locker, a guard or an error, not in an error's text.
//! Each store is used with a canary password it accepts (a lock taken and
//! released) and with one it cannot use (a server that is not there, or
//! one that refuses it), and everything said meanwhile is searched.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use distlock_testkit::postgres::shared_postgres;
use distlock_testkit::redis::{shared_cluster_url, shared_redis_url, shared_redlock_servers};
use distlock_testkit::redis_sentinel::{shared_sentinel_group, MASTER_NAME};
use distlock_testkit::zookeeper::{shared_standalone, zk_url};
use distlock_testkit::{etcd::shared_etcd_url, url::host_list};

/// Everything logged in this test binary.
fn logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&logs);
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || Sink(Arc::clone(&sink)))
            .try_init()
            .expect("the only subscriber of this test binary");
        logs
    })
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A password no test writes anywhere else.
fn canary() -> String {
    format!("canary-{:016x}", fastrand::u64(..))
}

/// Connects to `url`, takes and releases a lock if it can, and returns
/// everything the library said that the caller could see: `Debug` of the
/// locker and guard, `Display` and `Debug` of every error.
async fn said(url: &str) -> String {
    let mut said = String::new();
    match distlock::connect(url).await {
        Ok(locks) => {
            said += &format!("{locks:?}\n");
            match locks.try_lock("canary/k").await {
                Ok(Some(guard)) => {
                    said += &format!("{guard:?}\n");
                    if let Err(error) = guard.release().await {
                        said += &format!("{error}\n{error:?}\n");
                    }
                }
                Ok(None) => said += "busy\n",
                Err(error) => said += &format!("{error}\n{error:?}\n"),
            }
        }
        Err(error) => said += &format!("{error}\n{error:?}\n"),
    }
    said
}

/// Runs `said` on each URL and checks that `password` appears in none of
/// it and in no log line; returns what was said (for the caller's own
/// checks that the URLs were really used).
async fn never_shown(password: &str, urls: &[String]) -> Vec<String> {
    logs();
    let mut all = Vec::new();
    for url in urls {
        let text = said(url).await;
        assert!(!text.contains(password), "{url}: {text}");
        all.push(text);
    }
    let logged = String::from_utf8_lossy(&logs().lock().unwrap()).into_owned();
    assert!(!logged.is_empty(), "nothing was logged at trace level");
    assert!(
        !logged.contains(password),
        "a log line shows the password: {}",
        logged
            .lines()
            .find(|line| line.contains(password))
            .unwrap_or_default()
    );
    all
}

/// `host:port` of a Redis URL.
fn address(url: &str) -> &str {
    url.split("://")
        .nth(1)
        .unwrap()
        .split(['/', '?'])
        .next()
        .unwrap()
}

/// Makes user `user` with `password` and every right on the Redis server
/// at `addr`.
async fn redis_user(addr: &str, user: &str, password: &str) {
    let client = redis::Client::open(format!("redis://{addr}")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(user)
        .arg("on")
        .arg(format!(">{password}"))
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .query_async(&mut conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_passwords_never_show() {
    let password = canary();
    let single = shared_redis_url().await.unwrap();
    let cluster = shared_cluster_url().await.unwrap();
    let masters = shared_redlock_servers(3).await.unwrap();
    let sentinel = shared_sentinel_group().await.unwrap();
    let nodes: Vec<String> = address(&cluster).split(',').map(str::to_owned).collect();
    for addr in std::iter::once(address(&single).to_owned())
        .chain(nodes.iter().cloned())
        .chain(masters.iter().map(|m| m.addr().to_string()))
        .chain([&sentinel.master, &sentinel.replica].map(|s| s.addr().to_string()))
    {
        redis_user(&addr, "canary", &password).await;
    }
    let redlock_hosts = host_list(masters.iter().map(|m| m.addr()));
    let sentinels = format!("{}/{MASTER_NAME}", address(&sentinel.url()));
    let quick = "connect_timeout=300ms&response_timeout=300ms";
    let urls = [
        format!("redis://canary:{password}@{}/?{quick}", address(&single)),
        format!(
            "redis://{}/?user=canary&password={password}&{quick}",
            address(&single)
        ),
        format!(
            "redis+cluster://canary:{password}@{}?{quick}",
            nodes.join(",")
        ),
        format!("redlock://canary:{password}@{redlock_hosts}?{quick}"),
        format!("redis+sentinel://canary:{password}@{sentinels}?{quick}"),
        // Refused: another user's name with the canary.
        format!("redis://nobody:{password}@{}/?{quick}", address(&single)),
        // Nothing there.
        format!("redis://canary:{password}@127.0.0.1:1/?{quick}"),
        // The sentinels require no login: they refuse the one given.
        format!("redis+sentinel://{sentinels}?sentinel_password={password}&{quick}"),
        format!(
            "redis+sentinel://127.0.0.1:1/m?sentinel_user=u&sentinel_password={password}&{quick}"
        ),
    ];
    let said = never_shown(&password, &urls).await;
    for (url, text) in urls.iter().zip(&said).take(5) {
        assert!(text.contains("LockGuard"), "{url} took no lock: {text}");
    }
    assert!(!said[5].contains("LockGuard"), "a wrong user took a lock");
    for refused in &said[6..] {
        assert!(
            !refused.contains("LockGuard"),
            "a refused sentinel login took a lock"
        );
    }
}

/// A member of its own with authentication on, whose `root` user has
/// `password`.
async fn etcd_with_root_password(password: &str) -> distlock_testkit::Server {
    let member = distlock_testkit::etcd::etcd_spec("canary-etcd", false)
        .unwrap()
        .start()
        .await
        .unwrap();
    let endpoint = format!("http://{}", member.addr());
    let mut client = etcd_client::Client::connect([endpoint], None)
        .await
        .unwrap();
    client.user_add("root", password, None).await.unwrap();
    client.user_grant_role("root", "root").await.unwrap();
    client.auth_enable().await.unwrap();
    member
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_passwords_never_show() {
    let password = canary();
    let secured = etcd_with_root_password(&password).await;
    let base = shared_etcd_url().await.unwrap();
    let quick = "connect_timeout=300ms&response_timeout=1s";
    let urls = [
        // Accepted: a lock is taken and released with it.
        format!("etcd://root:{password}@{}?{quick}", secured.addr()),
        format!(
            "etcd://{}?user=root&password={password}&{quick}",
            secured.addr()
        ),
        // The shared member has no authentication on: the login fails.
        format!("{base}?user=root&password={password}&{quick}"),
        format!("etcd://root:{password}@127.0.0.1:1?{quick}"),
    ];
    let said = never_shown(&password, &urls).await;
    for (url, text) in urls.iter().zip(&said).take(2) {
        assert!(text.contains("LockGuard"), "{url} took no lock: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_passwords_never_show() {
    let password = canary();
    let addrs = shared_standalone().await.unwrap();
    let quick = "connect_timeout=1s&session_timeout=2s";
    let good =
        zk_url(&addrs, "/canary", quick).replacen("zk://", &format!("zk://canary:{password}@"), 1);
    let urls = [
        good.clone(),
        format!("zk://canary:{password}@127.0.0.1:1/canary?{quick}"),
    ];
    let said = never_shown(&password, &urls).await;
    assert!(
        said[0].contains("LockGuard"),
        "{good} took no lock: {}",
        said[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_passwords_never_show() {
    let password = canary();
    let server = shared_postgres().await.unwrap();
    // psql logs nothing here; the role may create the store's schema.
    server
        .psql(&format!(
            "CREATE ROLE canary LOGIN PASSWORD '{password}'; \
             GRANT CREATE ON DATABASE postgres TO canary"
        ))
        .await
        .unwrap();
    let addr = server.server().addr();
    let quick = "connect_timeout=1s&response_timeout=1s&schema=canary_locks";
    let nowhere = format!("postgres://canary:{password}@127.0.0.1:1/postgres");
    let urls = [
        // Accepted: a lock is taken and released with it.
        format!("postgres://canary:{password}@{addr}/postgres?{quick}"),
        format!("postgresql://{addr}/postgres?user=canary&password={password}&{quick}"),
        // Refused: another user's name with the canary.
        format!("postgres://nobody:{password}@{addr}/postgres?{quick}"),
        // Nothing there, for the locks or for the LISTEN connection alone.
        format!("{nowhere}?{quick}"),
        format!(
            "postgres://canary:{password}@{addr}/postgres?{quick}&listen_url={}",
            nowhere
                .replace(':', "%3A")
                .replace('/', "%2F")
                .replace('@', "%40")
        ),
    ];
    let said = never_shown(&password, &urls).await;
    for (url, text) in urls.iter().zip(&said).take(2) {
        assert!(text.contains("LockGuard"), "{url} took no lock: {text}");
    }
    for refused in &said[2..4] {
        assert!(
            !refused.contains("LockGuard"),
            "a refused login took a lock"
        );
    }
}
