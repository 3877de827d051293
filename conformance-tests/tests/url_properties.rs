//! Lock URLs drawn at random, thousands of cases per store: parsing never
//! panics, and a password — in the user info or as an option — never shows
//! in an error, in the `Debug` of what was parsed, or in a redacted URL.

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

/// An option list, with the names the stores know and others.
fn options() -> impl Strategy<Value = String> {
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
    prop::collection::vec((name, part()), 0..4).prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join("&")
    })
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
    fn a_password_in_the_user_info_never_shows(
        scheme in scheme(),
        user in "[a-z]{0,6}",
        password in "Zq[A-Z0-9]{10}",
        host in part(),
        path in part(),
        options in options(),
    ) {
        let url = format!("{scheme}://{user}:{password}@{host}/{path}?{options}");
        assert_never_shown(&url, &password)?;
    }

    /// A password given as an option never shows either.
    #[test]
    fn a_password_option_never_shows(
        scheme in scheme(),
        password in "Zq[A-Z0-9]{10}",
        host in part(),
        options in options(),
    ) {
        let url = format!("{scheme}://{host}/?{options}&password={password}");
        assert_never_shown(&url, &password)?;
    }

    /// Nor does a password inside a URL given as an option (PostgreSQL's
    /// `listen_url`), percent-encoded or not.
    #[test]
    fn a_password_in_a_nested_url_never_shows(
        scheme in scheme(),
        password in "Zq[A-Z0-9]{10}",
        host in part(),
        options in options(),
        encoded in any::<bool>(),
    ) {
        let nested = format!("postgres://u:{password}@{host}/db");
        let nested = if encoded {
            nested.replace(':', "%3A").replace('/', "%2F").replace('@', "%40")
        } else {
            nested
        };
        let url = format!("{scheme}://{host}/?{options}&listen_url={nested}");
        assert_never_shown(&url, &password)?;
    }
}

#[test]
fn cases_run() {
    eprintln!("url properties: 4 × {CASES} cases, each parsed by 5 stores and redacted");
}
