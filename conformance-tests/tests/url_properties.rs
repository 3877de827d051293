//! Lock URLs drawn at random, thousands of cases per store: parsing never
//! panics, and a password — in the user info or as an option — never shows
//! in an error, in the `Debug` of what was parsed, or in a redacted URL.
//! The URLs drawn must be read by every store both ways, some accepted and
//! some refused: a password in URLs every parser refuses at the first
//! character would prove little about the parsers.

use std::fmt::Debug;

use distlock::etcd::EtcdStore;
use distlock::file::FileStore;
use distlock::postgres::PgStore;
use distlock::redis::RedisStore;
use distlock::zookeeper::ZkStore;
use lock_core::backend::Store;
use lock_core::memory::MemoryStore;
use lock_core::open::parse;
use lock_core::url::redact;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

/// Cases per property and store.
const CASES: u32 = 2048;

/// What parsing `url` as a URL of store `S` shows: the error, or the
/// `Debug` of the settings read.
fn shown<S: Store>(url: &str) -> String
where
    S::Config: Debug,
{
    match parse::<S>(url) {
        Ok(parsed) => format!("{parsed:?}"),
        Err(error) => format!("{error} {error:?}"),
    }
}

/// Whether each store (file, Redis, etcd, ZooKeeper, PostgreSQL) accepts
/// `url`.
fn accepted_by_each(url: &str) -> [bool; 5] {
    [
        parse::<FileStore>(url).is_ok(),
        parse::<RedisStore>(url).is_ok(),
        parse::<EtcdStore>(url).is_ok(),
        parse::<ZkStore>(url).is_ok(),
        parse::<PgStore>(url).is_ok(),
    ]
}

/// The stores [`accepted_by_each`] asks, in its order.
const STORES: [&str; 5] = ["file", "redis", "etcd", "zookeeper", "postgres"];

/// Everything every store shows for `url`, and its redacted form.
fn shown_by_all(url: &str) -> String {
    [
        shown::<FileStore>(url),
        shown::<RedisStore>(url),
        shown::<EtcdStore>(url),
        shown::<ZkStore>(url),
        shown::<PgStore>(url),
        redact(url).to_string(),
    ]
    .join("\n")
}

/// Fails the case if anything any store shows for `url`
/// ([`shown_by_all`]) contains `password`.
fn assert_never_shown(url: &str, password: &str) -> Result<(), TestCaseError> {
    let shown = shown_by_all(url);
    prop_assert!(!shown.contains(password), "{url} showed: {shown}");
    Ok(())
}

/// A scheme: one of the stores', or noise.
fn scheme() -> impl Strategy<Value = String> {
    let schemes = [
        FileStore::SCHEMES,
        RedisStore::SCHEMES,
        EtcdStore::SCHEMES,
        ZkStore::SCHEMES,
        PgStore::SCHEMES,
        MemoryStore::SCHEMES,
    ]
    .concat();
    prop_oneof![
        prop::sample::select(schemes).prop_map(str::to_owned),
        "[a-z+]{0,8}",
    ]
}

/// Hosts, paths and options, including the odd characters URLs choke on.
fn part() -> impl Strategy<Value = String> {
    "[a-z0-9.:,/%@?&=\\[\\]{}_ -]{0,24}"
}

/// A host list: one the stores read (a name, an address, a port, several
/// hosts), or noise.
fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "localhost",
            "127.0.0.1",
            "db.example.com:6379",
            "127.0.0.1:2379,127.0.0.2:2379",
            "[::1]:5432",
        ])
        .prop_map(str::to_owned),
        1 => part(),
    ]
}

/// A path: none (what etcd and ZooKeeper take), one the others read (a
/// database number or name, a directory), or noise.
fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just(String::new()),
        2 => prop::sample::select(vec!["0", "locks", "var/locks"]).prop_map(str::to_owned),
        1 => part(),
    ]
}

/// An option list: none, options every store reads with valid values, or
/// names the stores know and others with any values.
fn options() -> impl Strategy<Value = String> {
    let valid = prop::sample::select(vec![
        "ttl=10s",
        "wait=5s",
        "namespace=jobs",
        "connect_timeout=2s",
    ]);
    let name = prop::sample::select(vec![
        "ttl",
        "wait",
        "namespace",
        "connect_timeout",
        "response_timeout",
        "session_timeout",
        "fsync",
        "check_interval",
        "user",
        "db",
        "tls_ca_file",
        "sslmode",
        "schema",
        "create_schema",
        "application_name",
        "listen_url",
        "colour",
    ]);
    let noise = prop::collection::vec((name, part()), 1..4).prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join("&")
    });
    prop_oneof![
        Just(String::new()),
        prop::collection::vec(valid, 1..3).prop_map(|pairs| pairs.join("&")),
        noise,
    ]
}

/// A password: distinctive enough that finding it anywhere is a leak.
fn password() -> impl Strategy<Value = String> {
    "Zq[A-Z0-9]{10}"
}

/// A URL with a password in its user info, and the password.
fn url_with_user_info_password() -> impl Strategy<Value = (String, String)> {
    (
        scheme(),
        "[a-z]{0,6}",
        password(),
        host(),
        path(),
        options(),
    )
        .prop_map(|(scheme, user, password, host, path, options)| {
            let url = format!("{scheme}://{user}:{password}@{host}/{path}?{options}");
            (url, password)
        })
}

/// A URL with a password as an option (after a user option or not), and
/// the password. The option is a pair of its own whatever comes before it
/// (`&` is never part of a host or a path).
fn url_with_password_option() -> impl Strategy<Value = (String, String)> {
    let user = prop_oneof![Just(""), Just("user=app&")];
    (scheme(), password(), host(), options(), user).prop_map(
        |(scheme, password, host, options, user)| {
            let url = format!("{scheme}://{host}/?{options}&{user}password={password}");
            (url, password)
        },
    )
}

/// A URL with a password inside a URL given as an option (PostgreSQL's
/// `listen_url`), percent-encoded or not, and the password.
fn url_with_nested_password() -> impl Strategy<Value = (String, String)> {
    (scheme(), password(), host(), options(), any::<bool>()).prop_map(
        |(scheme, password, host, options, encoded)| {
            let nested = format!("postgres://u:{password}@{host}/db");
            let nested = if encoded {
                nested
                    .replace(':', "%3A")
                    .replace('/', "%2F")
                    .replace('@', "%40")
            } else {
                nested
            };
            let url = format!("{scheme}://{host}/?{options}&listen_url={nested}");
            (url, password)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// Any text at all: no store panics on it.
    #[test]
    fn no_text_makes_a_parser_panic(text in "\\PC{0,120}") {
        let _ = shown_by_all(&text);
    }

    /// A password in the user info never shows, whatever surrounds it.
    #[test]
    fn a_password_in_the_user_info_never_shows((url, password) in url_with_user_info_password()) {
        assert_never_shown(&url, &password)?;
    }

    /// A password given as an option never shows either.
    #[test]
    fn a_password_option_never_shows((url, password) in url_with_password_option()) {
        assert_never_shown(&url, &password)?;
    }

    /// Nor does a password inside a URL given as an option (PostgreSQL's
    /// `listen_url`), percent-encoded or not.
    #[test]
    fn a_password_in_a_nested_url_never_shows((url, password) in url_with_nested_password()) {
        assert_never_shown(&url, &password)?;
    }
}

/// Of `CASES` URLs drawn from `urls` (with a fixed seed, so the figures
/// are the same every run), how many each store accepts.
fn accepted_of(urls: impl Strategy<Value = (String, String)>) -> [u32; 5] {
    let mut runner = TestRunner::deterministic();
    let mut accepted = [0; 5];
    for _ in 0..CASES {
        let (url, _) = urls.new_tree(&mut runner).unwrap().current();
        for (count, ok) in accepted.iter_mut().zip(accepted_by_each(&url)) {
            *count += u32::from(ok);
        }
    }
    accepted
}

/// The URLs each password property draws reach the parsers of the stores
/// that take such credentials both ways: each of them accepts some (so the
/// password goes through all of its reading, into the settings whose
/// `Debug` is checked) and refuses some (so its error messages are
/// checked). A store that takes no such credentials refuses every one —
/// the file store takes none, and only PostgreSQL reads `listen_url` —
/// rather than dropping them unseen. A generator whose URLs some store
/// always refuses (or always accepts) fails here.
#[test]
fn every_store_accepts_and_refuses_some_of_the_urls_drawn() {
    let least = CASES / 200;
    let credentials = ["redis", "etcd", "zookeeper", "postgres"];
    for (what, accepted, readers) in [
        (
            "user info",
            accepted_of(url_with_user_info_password()),
            &credentials[..],
        ),
        (
            "password option",
            accepted_of(url_with_password_option()),
            &credentials[..],
        ),
        (
            "nested URL",
            accepted_of(url_with_nested_password()),
            &["postgres"][..],
        ),
    ] {
        eprintln!(
            "URLs with a password in the {what}, of {CASES} accepted by {STORES:?}: {accepted:?}"
        );
        for (store, accepted) in STORES.iter().zip(accepted) {
            if readers.contains(store) {
                assert!(
                    accepted >= least && CASES - accepted >= least,
                    "{store} accepted {accepted} of {CASES} URLs with a password in the {what}; \
                     at least {least} should be accepted and as many refused"
                );
            } else {
                assert_eq!(
                    accepted, 0,
                    "{store} accepted URLs with a password in the {what}, which it cannot use"
                );
            }
        }
    }
}
