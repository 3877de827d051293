//! `distlock schema`: the SQL of the PostgreSQL store's layout for the
//! URL's `schema` option, printed without contacting the server; refused,
//! naming the problem, for any other URL. The printed text, run by an
//! operator, is enough for the store to work with `create_schema=false`.

#![cfg(feature = "postgres")]

mod common;

use common::{distlock_at, one_line_message, output, stderr, stdout};
use distlock_testkit::postgres::shared_postgres_url;
use distlock_testkit::with_query;

/// `distlock --url URL schema`: (exit code, stdout, stderr), stderr
/// empty on success and one `distlock: ` line otherwise.
fn schema(url: &str) -> (Option<i32>, String, String) {
    let out = output(distlock_at(url, &["schema"]));
    let message = if out.status.success() {
        stderr(&out)
    } else {
        one_line_message(&out)
    };
    (out.status.code(), stdout(&out), message)
}

#[test]
fn prints_the_sql_of_the_urls_schema_without_a_server() {
    // db.invalid never resolves: the text comes without a connection.
    let (code, sql, message) = schema("postgres://app:s3cret@db.invalid/app?schema=billing_locks");
    assert_eq!((code, message.as_str()), (Some(0), ""));
    assert!(
        sql.contains("CREATE SCHEMA IF NOT EXISTS \"billing_locks\";"),
        "{sql}"
    );
    assert!(sql.contains("\"billing_locks\".entries"), "{sql}");
    assert!(!sql.contains("\"distlock\""), "{sql}");
    let (code, sql, _) = schema("postgresql://db.invalid");
    assert_eq!(code, Some(0));
    assert!(
        sql.contains("CREATE SCHEMA IF NOT EXISTS \"distlock\";"),
        "{sql}"
    );
}

#[test]
fn refuses_a_url_of_another_store() {
    for url in ["redis://127.0.0.1:6379", "mem://x", "zk://127.0.0.1:2181"] {
        let (code, sql, message) = schema(url);
        assert_eq!(code, Some(2), "{url}: {message}");
        assert!(sql.is_empty(), "{url}: {sql}");
        assert!(message.contains("PostgreSQL"), "{url}: {message}");
        assert!(message.contains("postgres://"), "{url}: {message}");
    }
}

#[test]
fn refuses_a_bad_schema_name_naming_it_and_hiding_the_password() {
    for bad in ["Locks", "pg_locks", "1st", "a-b"] {
        let url = format!("postgres://app:s3cret@db.invalid/app?schema={bad}");
        let (code, sql, message) = schema(&url);
        assert_eq!(code, Some(2), "{bad}: {message}");
        assert!(sql.is_empty(), "{bad}: {sql}");
        assert!(message.contains("option `schema`"), "{bad}: {message}");
        assert!(!message.contains("s3cret"), "{bad}: {message}");
    }
    let (code, _, message) = schema("postgres://db.invalid?colour=red");
    assert_eq!(code, Some(2), "{message}");
    assert!(message.contains("unknown option `colour`"), "{message}");
}

/// What `distlock schema` prints, run by hand, lets a locker with
/// `create_schema=false` work where it refused before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_sql_is_what_create_schema_false_needs() {
    let base = shared_postgres_url()
        .await
        .expect("PostgreSQL for the tests");
    let name = format!("cli_schema_{:08x}", fastrand::u32(..));
    let url = with_query(&base, &format!("schema={name}&create_schema=false"));
    let run = |url: String| {
        tokio::task::spawn_blocking(move || output(distlock_at(&url, &["run", "k", "--", "true"])))
    };
    let refused = run(url.clone()).await.unwrap();
    assert_ne!(refused.status.code(), Some(0), "ran without the tables");
    let message = one_line_message(&refused);
    assert!(message.contains(&name), "{message}");

    let (code, sql, message) = schema(&url);
    assert_eq!(code, Some(0), "{message}");
    let (client, connection) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .expect("a raw connection");
    tokio::spawn(connection);
    client
        .batch_execute(&sql)
        .await
        .expect("the printed SQL runs");

    let ran = run(url).await.unwrap();
    assert_eq!(ran.status.code(), Some(0), "{}", one_line_message(&ran));
    client
        .batch_execute(&format!("DROP SCHEMA \"{name}\" CASCADE"))
        .await
        .expect("drop the test's schema");
}
