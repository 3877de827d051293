//! Store failures as `distlock` reports them: for each store and each kind
//! of failure, one stderr line `distlock: …` naming the host (or path),
//! what failed in plain words and what to try, never a client library's
//! internals or a password, with the documented exit code:
//!
//! * unreachable (a loopback listener that accepts and never answers) and
//!   refused (a port nobody listens on): 69;
//! * wrong protocol (the URL points at another store's port), TLS (a TLS
//!   URL at a plain port and the reverse, an untrusted server certificate,
//!   a missing client certificate): 2;
//! * permission (a wrong password, an ACL refusal, a lock directory this
//!   user may not write): 77.
//!
//! Servers are the testkit's, on loopback: the shared plain ones, and TLS
//! and authenticating ones of this binary. URLs carry short timeouts, so
//! each failure is reported within seconds. Each store's tests need the
//! command's feature for it (`zks://`: `zookeeper-tls`); `--all-features`
//! runs them all.

#[path = "../common/mod.rs"]
mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{distlock_at, one_line_message, output, test_server};
use distlock_testkit::pki::Pki;
use distlock_testkit::{shared_server, url_hosts, Server, ServerSpec};

/// Short timeouts for every URL: a failure is reported within a few.
const FAST: &str = "connect_timeout=500ms&response_timeout=500ms";
/// The longest a report may take, generous for a loaded machine.
const REPORTED_WITHIN: Duration = Duration::from_secs(20);
/// What no line may contain: dumps of a client library's internals and
/// OS error numbers.
const DUMPS: [&str; 5] = ["Error(", "os error", "{", "}", "Custom"];

/// What a failure's line must say.
struct Expected<'a> {
    code: i32,
    /// The host (or path) the line names.
    names: &'a str,
    /// What failed, in plain words.
    cause: &'a str,
    /// What to try.
    hint: &'a str,
}

/// Runs `distlock --url URL status k` and checks its report against
/// `expected`; `secret` (a password in the URL) must not appear. Returns
/// the line.
fn assert_status_fails(url: &str, expected: Expected<'_>, secret: Option<&str>) -> String {
    assert_fails(distlock_at(url, &["status", "k"]), expected, secret)
}

/// [`assert_status_fails`] for any `distlock` command.
fn assert_fails(command: Command, expected: Expected<'_>, secret: Option<&str>) -> String {
    let started = Instant::now();
    let out = output(command);
    let took = started.elapsed();
    let line = one_line_message(&out);
    assert_eq!(out.status.code(), Some(expected.code), "{line}");
    for (what, part) in [
        ("host", expected.names),
        ("cause", expected.cause),
        ("hint", expected.hint),
    ] {
        assert!(line.contains(part), "no {what} {part:?} in: {line}");
    }
    for dump in DUMPS {
        assert!(!line.contains(dump), "{dump:?} in: {line}");
    }
    if let Some(secret) = secret {
        assert!(!line.contains(secret), "the password in: {line}");
    }
    assert!(took < REPORTED_WITHIN, "took {took:?}: {line}");
    eprintln!("{took:?}: {line}");
    line
}

/// A loopback port nobody listens on.
fn refused_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().unwrap().port()
}

/// A loopback listener that accepts connections (the kernel does) and
/// never reads or answers; keep it alive while it is used.
fn silent_listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

/// The `host:port` of a URL with one host.
fn host_of(url: &str) -> String {
    url_hosts(url)[0].to_owned()
}

/// A network store as its lines name it, and how its URLs are made.
struct NetworkStore {
    /// The URL scheme (`etcd`, `redis+cluster`).
    scheme: &'static str,
    /// What the URL carries after the host (`/mymaster`), or nothing.
    path: &'static str,
    /// How the lines name the store (`Redis`, `ZooKeeper`).
    name: &'static str,
    /// The URLs' timeouts.
    query: &'static str,
    /// How soon a refused connection must be reported.
    refused_within: Duration,
}

impl NetworkStore {
    /// The store `name` behind `scheme://host?query`, a refused
    /// connection reported within [`REPORTED_WITHIN`].
    const fn new(scheme: &'static str, name: &'static str, query: &'static str) -> Self {
        Self {
            scheme,
            path: "",
            name,
            query,
            refused_within: REPORTED_WITHIN,
        }
    }

    /// This store's URL at `host`.
    fn url(&self, host: &str) -> String {
        format!("{}://{host}{}?{}", self.scheme, self.path, self.query)
    }

    /// At a port nobody listens on: exit 69 within `refused_within`,
    /// naming the store at the host and asking whether it runs there.
    fn refused(&self) {
        let port = refused_port();
        let host = format!("127.0.0.1:{port}");
        let started = Instant::now();
        let name = self.name;
        assert_status_fails(
            &self.url(&host),
            Expected {
                code: 69,
                names: &format!("{name} at {host}"),
                cause: "connection refused",
                hint: &format!("is {name} running there, and is {port} its client port?"),
            },
            None,
        );
        let took = started.elapsed();
        assert!(took < self.refused_within, "took {took:?}");
    }

    /// At a listener that never answers: exit 69, naming the store at the
    /// host and what it waited for (the query sets 500 ms).
    fn unreachable(&self) {
        let (_listener, host) = silent_listener();
        assert_status_fails(
            &self.url(&host),
            Expected {
                code: 69,
                names: &format!("{} at {host}", self.name),
                cause: "the connection was accepted, but nothing answered within 500ms",
                hint: "is the server stopped or overloaded",
            },
            None,
        );
    }

    /// At the host of `other`, another store's URL: exit 2, naming the
    /// host and saying the server there is not this store.
    fn at_the_port_of(&self, other: &str) {
        let host = host_of(other);
        assert_status_fails(
            &self.url(&host),
            Expected {
                code: 2,
                names: &host,
                cause: &format!("the server there is not {}", self.name),
                hint: "check the host and port in the URL",
            },
            None,
        );
    }
}

/// This binary's shared TLS server `name`, made by `spec` from [`pki`]'s
/// CA, server certificate and server key.
fn tls_server(
    name: &'static str,
    spec: impl FnOnce(PathBuf, PathBuf, PathBuf) -> Result<ServerSpec, String>,
) -> &'static Server {
    let pki = pki();
    test_server(shared_server(name, || {
        spec(
            pki.ca.clone(),
            pki.server_cert.clone(),
            pki.server_key.clone(),
        )
    }))
}

/// A store's plain and TLS servers, for the four TLS failures every
/// store reports alike (exit 2, naming the host, saying what to change).
struct TlsServers<'a> {
    /// The plain and the TLS scheme (`redis`, `rediss`).
    schemes: (&'a str, &'a str),
    /// A plain server and a TLS server requiring client certificates.
    plain_host: String,
    tls_host: String,
    /// `:password@` where the TLS server wants one, else empty.
    userinfo: &'a str,
    /// The URLs' timeouts.
    query: &'a str,
}

impl<'a> TlsServers<'a> {
    /// The servers at `plain_host` and `tls_host`, no password.
    fn new(
        schemes: (&'a str, &'a str),
        plain_host: String,
        tls_host: String,
        query: &'a str,
    ) -> Self {
        Self {
            schemes,
            plain_host,
            tls_host,
            userinfo: "",
            query,
        }
    }

    fn secret(&self) -> Option<&str> {
        let password = self.userinfo.trim_start_matches(':').trim_end_matches('@');
        (!password.is_empty()).then_some(password)
    }

    fn expect<'e>(&self, host: &'e str, cause: &'e str, hint: &'e str) -> Expected<'e> {
        Expected {
            code: 2,
            names: host,
            cause,
            hint,
        }
    }

    /// A TLS URL at the plain server: it does not speak TLS.
    fn tls_at_a_plain_port(&self) {
        let (plain, tls) = self.schemes;
        let host = &self.plain_host;
        let url = format!(
            "{tls}://{host}?{}&{}",
            self.query,
            tls_files(&pki().ca, true)
        );
        let hint = format!("use {plain}:// for this port");
        let cause = "the server does not speak TLS on this port";
        assert_status_fails(&url, self.expect(host, cause, &hint), None);
    }

    /// A plain URL at the TLS server: it expects TLS.
    fn plain_at_a_tls_port(&self) {
        let (plain, tls) = self.schemes;
        let host = &self.tls_host;
        let url = format!("{plain}://{}{host}?{}", self.userinfo, self.query);
        let hint = format!("use {tls}:// for this port");
        let expected = self.expect(host, "the server expects TLS", &hint);
        assert_status_fails(&url, expected, self.secret());
    }

    /// The TLS server's certificate checked against another CA.
    fn untrusted_server_certificate(&self) {
        let cause = "TLS: the server's certificate is not signed by a CA we trust";
        self.tls_url_fails(&pki().other_ca, true, cause, "set tls_ca_file");
    }

    /// No client certificate for a server that requires one.
    fn missing_client_certificate(&self) {
        let cause = "TLS: the server requires a client certificate";
        let hint = "set tls_cert_file and tls_key_file";
        self.tls_url_fails(&pki().ca, false, cause, hint);
    }

    /// A TLS URL at the TLS server trusting `ca`, with the client
    /// certificate unless `identity` is false, fails with `cause`, `hint`.
    fn tls_url_fails(&self, ca: &Path, identity: bool, cause: &str, hint: &str) {
        let host = &self.tls_host;
        let url = format!(
            "{}://{}{host}?{}&{}",
            self.schemes.1,
            self.userinfo,
            self.query,
            tls_files(ca, identity)
        );
        assert_status_fails(&url, self.expect(host, cause, hint), self.secret());
    }
}

/// Declares the four TLS failures of [`TlsServers`] as tests of their own,
/// named after them, each testing `$servers` (built anew per test).
macro_rules! tls_failure_tests {
    ($servers:expr) => {
        tls_failure_tests!(@each $servers;
            tls_at_a_plain_port plain_at_a_tls_port
            untrusted_server_certificate missing_client_certificate);
    };
    (@each $servers:expr; $($failure:ident)*) => {
        $(
            #[test]
            fn $failure() {
                $servers.$failure();
            }
        )*
    };
}

/// Declares, for `$store` (a [`NetworkStore`]), the tests `refused` and
/// `unreachable`, and one test per other store it is pointed at: `$test`
/// points it at the shared server of the store behind feature
/// `$feature`, whose URL `$other_url` makes, and expects it to say that
/// is not its store.
macro_rules! connection_failure_tests {
    ($store:ident; $($test:ident: $feature:literal $other_url:path),*) => {
        #[test]
        fn refused() {
            $store.refused();
        }

        #[test]
        fn unreachable() {
            $store.unreachable();
        }
        $(
            #[cfg(feature = $feature)]
            #[test]
            fn $test() {
                $store.at_the_port_of(&$other_url("errors", ""));
            }
        )*
    };
}

/// The certificates of this test binary.
fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(Pki::generate)
}

/// The TLS options trusting `ca`, with the client certificate unless
/// `identity` is false.
fn tls_files(ca: &Path, identity: bool) -> String {
    pki().tls_options(ca, identity)
}

/// A unique name for this test and process (users, namespaces).
fn unique(test: &str) -> String {
    format!("{test}-{}", std::process::id())
}

#[cfg(feature = "etcd")]
mod etcd;
mod file;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "zookeeper")]
mod zookeeper;
