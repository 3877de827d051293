//! redis: each kind of failure as the command reports it.

use super::*;
use distlock_testkit::redis::redis_tls_spec;

const PASSWORD: &str = "tls-secret-pw";

fn plain_host() -> String {
    host_of(&common::redis_url("errors", ""))
}

/// The TLS server: client certificates and [`PASSWORD`] required.
fn tls_server() -> &'static Server {
    let pki = pki();
    test_server(shared_server("redis-tls", || {
        redis_tls_spec(
            "redis-tls",
            pki.ca.clone(),
            pki.server_cert.clone(),
            pki.server_key.clone(),
            PASSWORD,
        )
    }))
}

fn tls_host() -> String {
    format!("127.0.0.1:{}", tls_server().ports()[1])
}

fn tls_servers() -> TlsServers<'static> {
    TlsServers {
        schemes: ("redis", "rediss"),
        plain_host: plain_host(),
        tls_host: tls_host(),
        // `:PASSWORD@`.
        userinfo: ":tls-secret-pw@",
        query: FAST,
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

#[test]
fn refused() {
    assert_refused("redis", "Redis", FAST);
}

#[test]
fn unreachable() {
    assert_unreachable("redis", "Redis", FAST);
}

#[cfg(feature = "etcd")]
#[test]
fn at_an_etcd_port() {
    let host = host_of(&common::etcd_url("errors", ""));
    assert_status_fails(
        &format!("redis://{host}?{FAST}"),
        wrong_protocol(&host),
        None,
    );
}

#[cfg(feature = "zookeeper")]
#[test]
fn at_a_zookeeper_port() {
    let host = host_of(&common::zookeeper_url("errors", ""));
    assert_status_fails(
        &format!("redis://{host}?{FAST}"),
        wrong_protocol(&host),
        None,
    );
}

fn wrong_protocol(host: &str) -> Expected<'_> {
    Expected {
        code: 2,
        names: host,
        cause: "the server there is not Redis",
        hint: "check the host and port in the URL",
    }
}

#[test]
fn tls_at_a_plain_port() {
    tls_servers().tls_at_a_plain_port();
}

#[test]
fn plain_at_a_tls_port() {
    tls_servers().plain_at_a_tls_port();
}

#[test]
fn untrusted_server_certificate() {
    tls_servers().untrusted_server_certificate();
}

#[test]
fn missing_client_certificate() {
    tls_servers().missing_client_certificate();
}

#[test]
fn wrong_password() {
    let user = unique("wrong-password");
    acl_user(&user, "the-right-pw", &["~*", "&*", "+@all"]);
    let host = plain_host();
    assert_status_fails(
        &format!("redis://{user}:not-the-right-pw@{host}?{FAST}"),
        Expected {
            code: 77,
            names: &format!("Redis at {host}"),
            cause: "WRONGPASS",
            hint: "the server refused the user name or password: check them in the URL",
        },
        Some("not-the-right-pw"),
    );
}

#[test]
fn acl_refusal() {
    let user = unique("no-scripts");
    acl_user(
        &user,
        "pw-no-scripts",
        &["~*", "&*", "+@all", "-@scripting"],
    );
    let host = plain_host();
    assert_status_fails(
        &format!("redis://{user}:pw-no-scripts@{host}?{FAST}"),
        Expected {
            code: 77,
            names: &format!("Redis at {host}"),
            cause: "this user has no permissions to run the 'evalsha' command",
            hint: "the user's ACL does not allow what the lock needs",
        },
        Some("pw-no-scripts"),
    );
}

#[test]
fn cluster_refused() {
    let port = refused_port();
    let host = format!("127.0.0.1:{port}");
    assert_status_fails(
        &format!("redis+cluster://{host}?{FAST}"),
        Expected {
            code: 69,
            names: &format!("Redis at {host}"),
            cause: "connection refused",
            hint: "is Redis running there",
        },
        None,
    );
}

#[cfg(feature = "zookeeper")]
#[test]
fn cluster_at_a_zookeeper_port() {
    let host = host_of(&common::zookeeper_url("errors", ""));
    assert_status_fails(
        &format!("redis+cluster://{host}?{FAST}"),
        wrong_protocol(&host),
        None,
    );
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
    let host = format!("127.0.0.1:{}", refused_port());
    assert_status_fails(
        &format!("redis+sentinel://{host}/mymaster?{FAST}"),
        Expected {
            code: 69,
            names: &format!("Redis Sentinel at {host}"),
            cause: "connection refused",
            hint: "is Redis Sentinel running there",
        },
        None,
    );
}
