//! Tests of the testkit's tools that need no server process: the fault
//! proxy (in front of an in-process echo server), program lookup, the
//! fencing-checked register and `eventually`.

mod common;

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{assert_mentions, exchange, python, read_within_quick, round_trip, QUICK, STALL};
use distlock_testkit::{
    env_override, eventually, find_program, install_hint, FaultProxy, FencedResource, StaleToken,
    REDIS_URL_VAR,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

// --------------------------------------------------------------- programs

#[test]
fn find_program_searches_path_and_absolute_paths() {
    let sh = find_program(&["no-such-program-xyz", "sh"], "install sh").unwrap();
    assert!(sh.ends_with("sh"));
    let python = python();
    let absolute = python.to_str().unwrap();
    assert_eq!(
        find_program(&["/no/such/dir/x", absolute], "-").unwrap(),
        python
    );
}

#[test]
fn find_program_says_what_to_install() {
    let hint = install_hint("redis-server", REDIS_URL_VAR);
    let err = find_program(&["no-such-redis-server-xyz"], &hint).unwrap_err();
    assert!(
        err.starts_with("no-such-redis-server-xyz not found: "),
        "{err}"
    );
    assert_mentions(
        &err,
        &[
            "scripts/test.sh",
            "Debian's redis-server",
            "DISTLOCK_TEST_REDIS_URL",
        ],
    );
}

#[test]
fn env_override_ignores_unset_variables() {
    assert_eq!(env_override("DISTLOCK_TEST_SURELY_UNSET_VARIABLE"), None);
    assert!(env_override("PATH").is_some());
}

// ------------------------------------------------------------------ proxy

/// An in-process echo server on the current runtime.
async fn tokio_echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// Whether a round trip on `stream` fails (error or end of stream)
/// within [`QUICK`]: what a client sees after a cut.
async fn fails_quickly(stream: &mut TcpStream) -> bool {
    matches!(timeout(QUICK, exchange(stream, b"?")).await, Ok(Err(_)))
}

/// A proxy in front of an in-process echo server, and a connection
/// through it that has made one round trip.
async fn proxy_with_a_live_connection() -> (FaultProxy, TcpStream) {
    let proxy = FaultProxy::start(tokio_echo().await).unwrap();
    let mut live = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(exchange(&mut live, b"a").await.unwrap(), b"a");
    (proxy, live)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_forwards_both_ways_and_counts_connections() {
    let proxy = FaultProxy::start(tokio_echo().await).unwrap();
    assert_eq!(proxy.addr().port(), proxy.port());
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    let big = vec![7u8; 1 << 20];
    assert_eq!(exchange(&mut stream, &big).await.unwrap(), big);
    assert_eq!(proxy.connections(), 1);
    drop(stream);
    eventually(QUICK, "the connection count to drop", || async {
        proxy.connections() == 0
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_cut_fails_live_and_new_connections_until_restored() {
    let (proxy, mut live) = proxy_with_a_live_connection().await;

    proxy.cut();
    assert_eq!(proxy.connections(), 0);
    assert!(
        fails_quickly(&mut live).await,
        "a live connection survived the cut"
    );
    // The kernel may complete the handshake, but the proxy resets it.
    if let Ok(mut fresh) = TcpStream::connect(proxy.addr()).await {
        assert!(fails_quickly(&mut fresh).await);
    }

    proxy.restore();
    assert_eq!(round_trip(proxy.addr(), b"back").await.unwrap(), b"back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_blackhole_stalls_silently_until_restored() {
    let (proxy, mut live) = proxy_with_a_live_connection().await;

    proxy.blackhole();
    let stalled = timeout(STALL, exchange(&mut live, b"b")).await;
    assert!(
        stalled.is_err(),
        "bytes moved through a blackhole: {stalled:?}"
    );
    let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
    assert!(timeout(STALL, exchange(&mut fresh, b"c")).await.is_err());
    assert_eq!(proxy.connections(), 2, "blackholed connections stay open");

    proxy.restore();
    assert_eq!(round_trip(proxy.addr(), b"new").await.unwrap(), b"new");
    // As documented, held bytes are delivered after the partition heals.
    assert_eq!(read_within_quick(&mut live, 1).await, b"b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_latency_delays_each_direction() {
    let (proxy, mut stream) = proxy_with_a_live_connection().await;

    proxy.set_latency(Duration::from_millis(100));
    let started = Instant::now();
    exchange(&mut stream, b"slow").await.unwrap();
    let rtt = started.elapsed();
    assert!(
        rtt >= Duration::from_millis(195),
        "round trip took only {rtt:?}"
    );
    assert!(rtt < Duration::from_secs(2), "round trip took {rtt:?}");

    proxy.set_latency(Duration::ZERO);
    let started = Instant::now();
    exchange(&mut stream, b"fast").await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_refuses_non_loopback_targets() {
    for target in [
        "10.1.2.3:80",
        "0.0.0.0:80",
        "[2001:db8::1]:80",
        "[::ffff:10.0.0.1]:80",
    ] {
        let err = FaultProxy::start(target.parse().unwrap()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{target}");
    }
    for target in ["127.0.0.1:9", "[::1]:9", "[::ffff:127.0.0.1]:9"] {
        assert!(
            FaultProxy::start(target.parse().unwrap()).is_ok(),
            "{target}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_proxy_closes_everything() {
    let (proxy, mut live) = proxy_with_a_live_connection().await;
    let addr = proxy.addr();
    drop(proxy);
    assert!(fails_quickly(&mut live).await);
    assert!(TcpStream::connect(addr).await.is_err());
}

// ---------------------------------------------------------------- fencing

#[test]
fn fenced_resource_rejects_only_lower_tokens() {
    let resource = FencedResource::new();
    assert_eq!(resource.highest(), None);
    resource.write(5, "first").unwrap();
    resource.write(5, "same holder again").unwrap();
    resource.write(7, "next holder").unwrap();
    let stale = resource.write(6, "paused holder").unwrap_err();
    assert_eq!(
        stale,
        StaleToken {
            presented: 6,
            highest: 7
        }
    );
    assert_eq!(
        stale.to_string(),
        "stale fencing token 6 (highest seen is 7)"
    );

    let clone = resource.clone();
    assert!(clone.write(1, "ancient").is_err());
    assert_eq!(resource.highest(), Some(7));
    assert_eq!(resource.accepted(), 3);
    assert_eq!(resource.rejected(), 2);
    assert_eq!(resource.last_write(), Some((7, "next holder".to_string())));
}

// ---------------------------------------------------------------- waiting

#[tokio::test]
async fn eventually_returns_the_value_once_the_check_passes() {
    let mut calls = 0;
    let value = eventually(QUICK, "three calls", || {
        calls += 1;
        let done = calls >= 3;
        async move { done.then_some(calls) }
    })
    .await
    .unwrap();
    assert_eq!(value, 3);
}

#[tokio::test]
async fn eventually_times_out_naming_what_and_the_last_error() {
    let started = Instant::now();
    let err = eventually(Duration::from_millis(100), "the moon", || async {
        Err::<(), _>("not yet")
    })
    .await
    .unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert!(err.contains("the moon") && err.contains("not yet"), "{err}");
}
