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

mod common;

use std::net::TcpListener;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{distlock_at, one_line_message, output, test_server};
use distlock_testkit::pki::Pki;
use distlock_testkit::{shared_server, url_hosts, Server};

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

/// A `scheme://` URL at a port nobody listens on is refused: exit 69,
/// naming `store` at the host and asking whether it runs there. Returns
/// how long the report took.
fn assert_refused(scheme: &str, store: &str, query: &str) -> Duration {
    let port = refused_port();
    let host = format!("127.0.0.1:{port}");
    let started = Instant::now();
    assert_status_fails(
        &format!("{scheme}://{host}?{query}"),
        Expected {
            code: 69,
            names: &format!("{store} at {host}"),
            cause: "connection refused",
            hint: &format!("is {store} running there, and is {port} its client port?"),
        },
        None,
    );
    started.elapsed()
}

/// A `scheme://` URL at a listener that never answers: exit 69, naming
/// `store` at the host and what it waited for (`query` sets 500 ms).
fn assert_unreachable(scheme: &str, store: &str, query: &str) {
    let (_listener, host) = silent_listener();
    assert_status_fails(
        &format!("{scheme}://{host}?{query}"),
        Expected {
            code: 69,
            names: &format!("{store} at {host}"),
            cause: "the connection was accepted, but nothing answered within 500ms",
            hint: "is the server stopped or overloaded",
        },
        None,
    );
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

impl TlsServers<'_> {
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
        let host = &self.tls_host;
        let files = tls_files(&pki().other_ca, true);
        let url = format!(
            "{}://{}{host}?{}&{files}",
            self.schemes.1, self.userinfo, self.query
        );
        let cause = "TLS: the server's certificate is not signed by a CA we trust";
        let expected = self.expect(host, cause, "set tls_ca_file");
        assert_status_fails(&url, expected, self.secret());
    }

    /// No client certificate for a server that requires one.
    fn missing_client_certificate(&self) {
        let host = &self.tls_host;
        let files = tls_files(&pki().ca, false);
        let url = format!(
            "{}://{}{host}?{}&{files}",
            self.schemes.1, self.userinfo, self.query
        );
        let cause = "TLS: the server requires a client certificate";
        let expected = self.expect(host, cause, "set tls_cert_file and tls_key_file");
        assert_status_fails(&url, expected, self.secret());
    }
}

/// The certificates of this test binary.
fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(Pki::generate)
}

/// The TLS options trusting `ca`, with the client certificate unless
/// `identity` is false.
fn tls_files(ca: &std::path::Path, identity: bool) -> String {
    pki().tls_options(ca, identity)
}

/// A unique name for this test and process (users, namespaces).
fn unique(test: &str) -> String {
    format!("{test}-{}", std::process::id())
}

#[cfg(feature = "redis")]
mod redis {
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
}

#[cfg(feature = "etcd")]
mod etcd {
    use super::*;
    use distlock_testkit::etcd::{etcd_spec, etcd_tls_spec};
    use etcd_client::{Client, Permission};

    const ROOT_PASSWORD: &str = "etcd-root-pw";

    fn plain_host() -> String {
        host_of(&common::etcd_url("errors", ""))
    }

    /// The TLS member: client certificates required.
    fn tls_host() -> String {
        let pki = pki();
        let server = test_server(shared_server("etcd-tls", || {
            etcd_tls_spec(
                "etcd-tls",
                pki.ca.clone(),
                pki.server_cert.clone(),
                pki.server_key.clone(),
            )
        }));
        server.addr().to_string()
    }

    fn tls_servers() -> TlsServers<'static> {
        TlsServers {
            schemes: ("etcd", "etcds"),
            plain_host: plain_host(),
            tls_host: tls_host(),
            userinfo: "",
            query: FAST,
        }
    }

    /// A member with authentication on: user `root` ([`ROOT_PASSWORD`])
    /// and user `guest` (password `guest-pw`), whose role may read and
    /// write only keys under `elsewhere/`.
    fn auth_host() -> String {
        let server = test_server(async {
            let server = shared_server("etcd-auth", || etcd_spec("etcd-auth", false)).await?;
            static ENABLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
            ENABLED
                .get_or_try_init(|| enable_auth(server))
                .await
                .map(|_| server)
        });
        server.addr().to_string()
    }

    async fn enable_auth(server: &Server) -> Result<(), String> {
        let endpoint = format!("http://{}", server.addr());
        let mut client = Client::connect([endpoint], None)
            .await
            .map_err(|e| e.to_string())?;
        let fail = |e: etcd_client::Error| e.to_string();
        distlock_testkit::eventually(Duration::from_secs(20), "a leader", || {
            let mut client = client.clone();
            async move { client.user_add("root", ROOT_PASSWORD, None).await }
        })
        .await?;
        client.user_grant_role("root", "root").await.map_err(fail)?;
        client.role_add("elsewhere").await.map_err(fail)?;
        let elsewhere = Permission::read_write("elsewhere/").with_prefix();
        client
            .role_grant_permission("elsewhere", elsewhere)
            .await
            .map_err(fail)?;
        client
            .user_add("guest", "guest-pw", None)
            .await
            .map_err(fail)?;
        client
            .user_grant_role("guest", "elsewhere")
            .await
            .map_err(fail)?;
        client.auth_enable().await.map_err(fail)?;
        Ok(())
    }

    fn wrong_protocol(host: &str) -> Expected<'_> {
        Expected {
            code: 2,
            names: host,
            cause: "the server there is not etcd",
            hint: "check the host and port in the URL",
        }
    }

    #[test]
    fn refused_at_once() {
        // One endpoint: nothing to retry against, no waiting out the
        // response timeout.
        let took = assert_refused("etcd", "etcd", FAST);
        assert!(took < Duration::from_secs(3), "took {took:?}");
    }

    #[test]
    fn unreachable() {
        assert_unreachable("etcd", "etcd", FAST);
    }

    #[cfg(feature = "redis")]
    #[test]
    fn at_a_redis_port() {
        let host = host_of(&common::redis_url("errors", ""));
        assert_status_fails(
            &format!("etcd://{host}?{FAST}"),
            wrong_protocol(&host),
            None,
        );
    }

    #[cfg(feature = "zookeeper")]
    #[test]
    fn at_a_zookeeper_port() {
        let host = host_of(&common::zookeeper_url("errors", ""));
        assert_status_fails(
            &format!("etcd://{host}?{FAST}"),
            wrong_protocol(&host),
            None,
        );
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
        let host = auth_host();
        assert_status_fails(
            &format!("etcd://root:not-the-root-pw@{host}?{FAST}"),
            Expected {
                code: 77,
                names: &host,
                cause: "etcd refused the user name or password",
                hint: "check them in the URL",
            },
            Some("not-the-root-pw"),
        );
    }

    #[test]
    fn permission_refused() {
        let host = auth_host();
        let namespace = unique("guest");
        assert_status_fails(
            &format!("etcd://guest:guest-pw@{host}?{FAST}&namespace={namespace}"),
            Expected {
                code: 77,
                names: &host,
                cause: "etcd denied permission",
                hint:
                    "give a user and password whose role may read and write keys under `distlock/`",
            },
            Some("guest-pw"),
        );
    }
}

#[cfg(feature = "zookeeper")]
mod zookeeper {
    use super::*;
    #[cfg(feature = "zookeeper-tls")]
    use distlock_testkit::zookeeper::tls_standalone_spec;

    /// ZooKeeper's requests have no timeout of their own: only the connect
    /// timeout is short.
    const ZK_FAST: &str = "connect_timeout=500ms";
    /// The same against the TLS server: a JVM's TLS handshake on a loaded
    /// machine can take longer than half a second, and the probe waits
    /// as long as the URL's connect timeout.
    #[cfg(feature = "zookeeper-tls")]
    const ZK_TLS_FAST: &str = "connect_timeout=3s";

    fn plain_host() -> String {
        host_of(&common::zookeeper_url("errors", ""))
    }

    /// The TLS server's secure port: client certificates required.
    #[cfg(feature = "zookeeper-tls")]
    fn tls_host() -> String {
        let pki = pki();
        let server = test_server(shared_server("zookeeper-tls", || {
            tls_standalone_spec(
                pki.ca.clone(),
                pki.server_cert.clone(),
                pki.server_key.clone(),
            )
        }));
        format!("127.0.0.1:{}", server.ports()[1])
    }

    #[cfg(feature = "zookeeper-tls")]
    fn tls_servers() -> TlsServers<'static> {
        TlsServers {
            schemes: ("zk", "zks"),
            plain_host: plain_host(),
            tls_host: tls_host(),
            userinfo: "",
            query: ZK_TLS_FAST,
        }
    }

    fn wrong_protocol(host: &str) -> Expected<'_> {
        Expected {
            code: 2,
            names: host,
            cause: "the server there is not ZooKeeper",
            hint: "check the host and port in the URL",
        }
    }

    #[test]
    fn refused() {
        assert_refused("zk", "ZooKeeper", ZK_FAST);
    }

    #[test]
    fn unreachable() {
        assert_unreachable("zk", "ZooKeeper", ZK_FAST);
    }

    #[cfg(feature = "redis")]
    #[test]
    fn at_a_redis_port() {
        let host = host_of(&common::redis_url("errors", ""));
        assert_status_fails(
            &format!("zk://{host}?{ZK_FAST}"),
            wrong_protocol(&host),
            None,
        );
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn at_an_etcd_port() {
        let host = host_of(&common::etcd_url("errors", ""));
        assert_status_fails(
            &format!("zk://{host}?{ZK_FAST}"),
            wrong_protocol(&host),
            None,
        );
    }

    #[cfg(feature = "zookeeper-tls")]
    #[test]
    fn tls_at_a_plain_port() {
        tls_servers().tls_at_a_plain_port();
    }

    #[cfg(feature = "zookeeper-tls")]
    #[test]
    fn plain_at_a_tls_port() {
        tls_servers().plain_at_a_tls_port();
    }

    #[cfg(feature = "zookeeper-tls")]
    #[test]
    fn untrusted_server_certificate() {
        tls_servers().untrusted_server_certificate();
    }

    #[cfg(feature = "zookeeper-tls")]
    #[test]
    fn missing_client_certificate() {
        tls_servers().missing_client_certificate();
    }

    /// Nodes created with digest credentials are only for the same
    /// credentials: another user's `status` is refused.
    #[test]
    fn acl_refusal() {
        let host = plain_host();
        let namespace = unique("acl");
        let query = format!("{ZK_FAST}&namespace={namespace}&ttl=30s");
        let alice = format!("zk://{host}/acl-errors?{query}&user=alice&password=alice-pw");
        let held = tempfile::tempdir().unwrap();
        let ready = held.path().join("ready");
        let script = format!("touch {}; sleep 30", ready.display());
        let mut holder = distlock_at(&alice, &["run", "k", "--", "sh", "-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        common::wait_for(|| ready.exists(), "alice to hold the lock");
        let bob = format!("zk://{host}/acl-errors?{query}&user=bob&password=bob-pw");
        let line = assert_status_fails(
            &bob,
            Expected {
                code: 77,
                names: "/acl-errors/",
                cause: "not authorized",
                hint: "check the credentials in the lock URL",
            },
            Some("bob-pw"),
        );
        assert!(!line.contains("alice-pw"), "{line}");
        common::signal(holder.id(), libc::SIGTERM);
        common::wait(&mut holder);
    }
}

mod file {
    use super::*;
    use std::os::unix::fs::{chown, PermissionsExt};
    use std::os::unix::process::CommandExt;

    /// The user the `distlock` under test runs as: `nobody` when the test
    /// runs as root (root may write anywhere), else the test's own user.
    fn as_unprivileged(mut command: Command) -> Command {
        if running_as_root() {
            command.uid(NOBODY).gid(NOBODY);
        }
        command
    }

    const NOBODY: u32 = 65534;

    fn running_as_root() -> bool {
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() == 0 }
    }

    fn status(dir: &std::path::Path) -> Command {
        let url = format!("file://{}", dir.display());
        as_unprivileged(distlock_at(&url, &["status", "k"]))
    }

    /// A directory the test's user may traverse, for the lock directories.
    fn parent() -> tempfile::TempDir {
        let parent = tempfile::tempdir().unwrap();
        std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        parent
    }

    #[test]
    fn a_read_only_lock_directory() {
        let parent = parent();
        let dir = parent.path().join("read-only");
        std::fs::create_dir(&dir).unwrap();
        if running_as_root() {
            chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o500)).unwrap();
        let shown = dir.display().to_string();
        assert_fails(
            status(&dir),
            Expected {
                code: 77,
                names: &format!("lock directory `{shown}`"),
                cause: "is not writable: permission denied",
                hint: "give it write access (chmod u+w), or use a lock directory of its own",
            },
            None,
        );
    }

    #[test]
    fn a_lock_directory_of_another_user() {
        // Run as root: a directory of root's, used by `nobody`; otherwise
        // the root directory, which belongs to root.
        let parent = parent();
        let dir = if running_as_root() {
            let dir = parent.path().join("roots");
            std::fs::create_dir(&dir).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
            dir
        } else {
            std::path::PathBuf::from("/")
        };
        let shown = dir.display().to_string();
        assert_fails(
            status(&dir),
            Expected {
                code: 77,
                names: &format!("`{shown}` belongs to uid 0"),
                cause: "permission denied",
                hint: "run as that user, or give uid",
            },
            None,
        );
    }
}
