//! redis: each kind of failure as the command reports it.

use super::*;
use distlock_testkit::redis::redis_tls_spec;

const PASSWORD: &str = "tls-secret-pw";

const REDIS: NetworkStore = NetworkStore::new("redis", "Redis", FAST);

const REDIS_CLUSTER: NetworkStore = NetworkStore::new("redis+cluster", "Redis", FAST);

const REDIS_SENTINEL: NetworkStore = NetworkStore {
    scheme: "redis+sentinel",
    path: "/mymaster",
    name: "Redis Sentinel",
    ..REDIS
};

fn plain_host() -> String {
    host_of(&common::redis_url("errors", ""))
}

/// The TLS server: client certificates and [`PASSWORD`] required.
fn tls_host() -> String {
    let server = tls_server("redis-tls", |ca, cert, key| {
        redis_tls_spec("redis-tls", ca, cert, key, PASSWORD)
    });
    format!("127.0.0.1:{}", server.ports()[1])
}

fn tls_servers() -> TlsServers<'static> {
    TlsServers {
        // `:PASSWORD@`.
        userinfo: ":tls-secret-pw@",
        ..TlsServers::new(("redis", "rediss"), plain_host(), tls_host(), FAST)
    }
}

/// Sends one command to the shared server and checks it said `+OK`.
fn command(args: &[&str]) {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(plain_host()).unwrap();
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    tcp.write_all(request.as_bytes()).unwrap();
    let mut reply = [0u8; 64];
    let read = tcp.read(&mut reply).unwrap();
    assert!(
        reply[..read].starts_with(b"+OK"),
        "{args:?}: {:?}",
        &reply[..read]
    );
}

/// An ACL user `name` with password `password` and `rules`.
fn acl_user(name: &str, password: &str, rules: &[&str]) {
    let pass = format!(">{password}");
    let mut args = vec!["ACL", "SETUSER", name, "reset", "on", &pass];
    args.extend_from_slice(rules);
    command(&args);
}

connection_failure_tests!(REDIS;
    at_an_etcd_port: "etcd" common::etcd_url,
    at_a_zookeeper_port: "zookeeper" common::zookeeper_url);

tls_failure_tests!(tls_servers());

/// `status` as a fresh ACL user (`test` names it) with `password` and
/// `rules`, logging in with `given`: exit 77, naming Redis at the host,
/// `cause` and `hint`, and never showing `given`.
fn assert_user_refused(
    test: &str,
    password: &str,
    given: &str,
    rules: &[&str],
    cause: &str,
    hint: &str,
) {
    let user = unique(test);
    acl_user(&user, password, rules);
    let host = plain_host();
    assert_status_fails(
        &format!("redis://{user}:{given}@{host}?{FAST}"),
        Expected {
            code: 77,
            names: &format!("Redis at {host}"),
            cause,
            hint,
        },
        Some(given),
    );
}

#[test]
fn wrong_password() {
    assert_user_refused(
        "wrong-password",
        "the-right-pw",
        "not-the-right-pw",
        &["~*", "&*", "+@all"],
        "WRONGPASS",
        "the server refused the user name or password: check them in the URL",
    );
}

#[test]
fn acl_refusal() {
    assert_user_refused(
        "no-scripts",
        "pw-no-scripts",
        "pw-no-scripts",
        &["~*", "&*", "+@all", "-@scripting"],
        "this user has no permissions to run the 'evalsha' command",
        "the user's ACL does not allow what the lock needs",
    );
}

#[test]
fn cluster_refused() {
    REDIS_CLUSTER.refused();
}

#[cfg(feature = "zookeeper")]
#[test]
fn cluster_at_a_zookeeper_port() {
    REDIS_CLUSTER.at_the_port_of(&common::zookeeper_url("errors", ""));
}

#[test]
fn redlock_masters_refused() {
    let hosts: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", refused_port()))
        .collect();
    assert_status_fails(
        &format!("redlock://{}?{FAST}", hosts.join(",")),
        Expected {
            code: 69,
            names: &hosts[2],
            cause: "only 0 of 3 Redlock masters answered, 2 needed: cannot connect to Redis at",
            hint: "is Redis running there",
        },
        None,
    );
}

#[test]
fn sentinel_refused() {
    REDIS_SENTINEL.refused();
}
