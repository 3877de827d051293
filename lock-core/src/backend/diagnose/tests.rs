//! The probe against loopback listeners that refuse, stay silent, close,
//! or answer in this or another protocol. TLS findings are checked
//! against real TLS servers in the store crates' tests.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use super::*;

const LIMIT: Duration = Duration::from_millis(300);

/// A line protocol: the client says `HELLO`, the server `HI`.
struct Hello {
    may_close: bool,
}

impl Protocol for Hello {
    fn store(&self) -> &'static str {
        "Hello"
    }
    fn plain_scheme(&self) -> &'static str {
        "hello"
    }
    fn tls_scheme(&self) -> &'static str {
        "hellos"
    }
    fn greeting(&self) -> Vec<u8> {
        b"HELLO\n".to_vec()
    }
    fn judge(&self, reply: &[u8]) -> Verdict {
        match reply {
            [b'H', b'I', ..] => Verdict::Recognised,
            [b'H'] => Verdict::NeedMore,
            _ => Verdict::Foreign,
        }
    }
    fn may_close_unanswered(&self) -> bool {
        self.may_close
    }
}

static HELLO: Hello = Hello { may_close: false };
static HELLO_MAY_CLOSE: Hello = Hello { may_close: true };

/// A listener on a free loopback port whose every connection gets
/// `serve`, on a thread of its own.
fn server(serve: fn(std::net::TcpStream)) -> HostPort {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || serve(stream));
        }
    });
    HostPort::new("127.0.0.1", port)
}

/// Reads the client's first line and answers `reply`.
fn answering(mut stream: std::net::TcpStream, reply: &[u8]) {
    let mut line = [0u8; 64];
    let _ = stream.read(&mut line);
    let _ = stream.write_all(reply);
    thread::sleep(Duration::from_secs(2));
}

async fn probe(protocol: &'static dyn Protocol, host: HostPort) -> Finding {
    let target = Target {
        host,
        tls: None,
        limit: LIMIT,
    };
    diagnose(protocol, target).await
}

#[tokio::test]
async fn a_closed_port_is_refused() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let finding = probe(&HELLO, HostPort::new("127.0.0.1", port)).await;
    assert_eq!(finding, Finding::Refused);
}

#[tokio::test]
async fn a_listener_that_never_reads_gives_no_answer_within_the_bound() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let host = HostPort::new("127.0.0.1", listener.local_addr().unwrap().port());
    let started = Instant::now();
    assert_eq!(probe(&HELLO, host).await, Finding::NoAnswer);
    assert!(started.elapsed() < LIMIT * 4, "{:?}", started.elapsed());
    drop(listener);
}

#[tokio::test]
async fn a_server_of_the_protocol_is_answered() {
    let host = server(|s| answering(s, b"HI\n"));
    assert_eq!(probe(&HELLO, host).await, Finding::Answered);
}

#[tokio::test]
async fn a_reply_split_over_reads_is_judged_whole() {
    let host = server(|mut s| {
        let _ = s.read(&mut [0u8; 64]);
        let _ = s.write_all(b"H");
        thread::sleep(Duration::from_millis(50));
        let _ = s.write_all(b"I\n");
        thread::sleep(Duration::from_secs(2));
    });
    assert_eq!(probe(&HELLO, host).await, Finding::Answered);
}

#[tokio::test]
async fn another_protocol_is_told_apart() {
    let host = server(|s| answering(s, b"HTTP/1.0 400 Bad Request\r\n\r\n"));
    assert_eq!(probe(&HELLO, host).await, Finding::OtherProtocol);
}

#[tokio::test]
async fn a_close_at_the_greeting_is_another_protocol_unless_the_store_may_close() {
    let closing = server(|mut s| {
        let _ = s.read(&mut [0u8; 64]);
    });
    assert_eq!(probe(&HELLO, closing.clone()).await, Finding::OtherProtocol);
    assert_eq!(probe(&HELLO_MAY_CLOSE, closing).await, Finding::Closed);
}

#[tokio::test]
async fn a_server_that_closes_every_connection_is_closed_not_another_protocol() {
    // Like a proxy with no server behind it: closed before any request.
    let closing = server(drop);
    assert_eq!(probe(&HELLO, closing).await, Finding::Closed);
}

#[tokio::test]
async fn a_server_silent_to_the_greeting_but_answering_a_plain_line_is_another_protocol() {
    // Like Redis greeted in binary: it waits for a line end.
    let host = server(|mut s| {
        let mut seen = Vec::new();
        let mut buffer = [0u8; 64];
        while let Ok(n @ 1..) = s.read(&mut buffer) {
            seen.extend_from_slice(&buffer[..n]);
            if seen.ends_with(b"\r\n\r\n") {
                let _ = s.write_all(b"-ERR unknown command\r\n");
            }
        }
    });
    static BINARY: Binary = Binary;
    assert_eq!(probe(&BINARY, host).await, Finding::OtherProtocol);
}

/// [`Hello`] with a greeting that has no line end.
struct Binary;

impl Protocol for Binary {
    fn store(&self) -> &'static str {
        "Binary"
    }
    fn plain_scheme(&self) -> &'static str {
        "binary"
    }
    fn tls_scheme(&self) -> &'static str {
        "binarys"
    }
    fn greeting(&self) -> Vec<u8> {
        vec![0, 0, 0, 4, 1, 2, 3, 4]
    }
    fn judge(&self, reply: &[u8]) -> Verdict {
        HELLO.judge(reply)
    }
}

#[tokio::test]
async fn explain_names_the_host_what_failed_and_what_to_try() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let host = HostPort::new("127.0.0.1", port);
    let vague = LockError::unavailable("broken pipe", std::io::Error::other("x"));
    let error = explain(&HELLO, &[host], None, LIMIT, vague).await;
    assert!(error.is_retriable(), "{error:?}");
    assert_eq!(
        error.to_string(),
        format!(
            "store unavailable: cannot connect to Hello at 127.0.0.1:{port}: connection refused \
             (is Hello running there, and is {port} its client port?)"
        )
    );
}

#[tokio::test]
async fn explain_keeps_the_error_when_a_host_answers_as_the_store() {
    let good = server(|s| answering(s, b"HI\n"));
    let refused = HostPort::new("127.0.0.1", 1);
    let original = LockError::invalid_config("wrong password");
    let error = explain(&HELLO, &[refused, good], None, LIMIT, original).await;
    assert_eq!(error.to_string(), "invalid configuration: wrong password");
}

#[tokio::test]
async fn explain_puts_a_wrong_server_first_and_as_a_configuration_error() {
    let foreign = server(|s| answering(s, b"nope\n"));
    let refused = HostPort::new("127.0.0.1", 1);
    let vague = LockError::unavailable("x", std::io::Error::other("x"));
    let error = explain(&HELLO, &[refused, foreign.clone()], None, LIMIT, vague).await;
    assert!(
        matches!(error, LockError::InvalidConfig { .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.starts_with(&format!(
            "invalid configuration: cannot connect to Hello at {foreign}: the server there is not Hello"
        )) && text.ends_with("; 127.0.0.1:1: connection refused"),
        "{text}"
    );
}

#[test]
fn causes_read_plainly() {
    let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    assert_eq!(io_words(&refused), "connection refused");
    let os = std::io::Error::from_raw_os_error(libc::EXDEV);
    assert!(!io_words(&os).contains("os error"), "{}", io_words(&os));
    let chained = LockError::unavailable("cannot reach", refused);
    assert_eq!(root_cause(&chained).as_deref(), Some("connection refused"));
    let dump = LockError::backend("odd", "Transport(ConnectError(Os { code: 1 }))");
    assert_eq!(root_cause(&dump), None);
    assert_eq!(root_cause(&LockError::invalid_config("x")), None);
}
