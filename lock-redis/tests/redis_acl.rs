//! Redis ACL users: a user with the rights distlock needs takes, waits for
//! and hands over locks; a user denied a command distlock needs gets a
//! clear permission error at once (naming the server and the user's ACL,
//! not the password), never a hang nor a retried "unavailable".

mod common;

use std::time::{Duration, Instant};

use common::{connect, raw_redis};
use distlock_testkit::redis::shared_redis_url;
use distlock_testkit::refusals::{assert_refused, Refused};
use distlock_testkit::scenarios::hand_over;
use lock_core::Locker;

/// The commands distlock needs: scripts, the pub/sub channels of
/// hand-offs and watches (`&*`), reads and writes of its keys; no
/// administrative or dangerous commands.
const LOCK_RIGHTS: &[&str] = &[
    "&*",
    "+@scripting",
    "+@pubsub",
    "+@read",
    "+@write",
    "+time",
    "+ping",
    "+hello",
    "+client|setname",
];

/// Makes `user` with password `password`, access to the keys matching
/// `keys` (an ACL key pattern) and the rules `rules`.
async fn acl_user(user: &str, password: &str, keys: &str, rules: &[&str]) {
    let mut raw = raw_redis().await;
    let mut cmd = ::redis::cmd("ACL");
    cmd.arg("SETUSER")
        .arg(user)
        .arg("reset")
        .arg("on")
        .arg(format!(">{password}"))
        .arg(format!("~{keys}"));
    for rule in rules {
        cmd.arg(*rule);
    }
    let _: () = cmd.query_async(&mut raw).await.unwrap();
}

/// The URL of the shared server as `user`.
async fn url_as(user: &str, password: &str, namespace: &str) -> String {
    let base = shared_redis_url().await.unwrap();
    let host = base.trim_start_matches("redis://");
    format!("redis://{user}:{password}@{host}/?namespace={namespace}&connect_timeout=1s&response_timeout=1s")
}

/// Makes `user` (password `pw-<user>`) with [`LOCK_RIGHTS`] on the keys
/// matching `keys`, and opens two lockers as `user` in `namespace`.
async fn lockers_with_lock_rights(user: &str, keys: &str, namespace: &str) -> (Locker, Locker) {
    let password = format!("pw-{user}");
    acl_user(user, &password, keys, LOCK_RIGHTS).await;
    let url = url_as(user, &password, namespace).await;
    (connect(&url).await.unwrap(), connect(&url).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_the_needed_rights_takes_and_hands_over_locks() {
    let (a, b) = lockers_with_lock_rights("locks", "*", "acl-ok").await;
    hand_over(&a, &b, "k").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_denied_scripts_gets_a_clear_error_at_once() {
    let denied = ["&*", "+@all", "-evalsha", "-eval", "-script"];
    acl_user("noscripts", "pw-noscripts", "*", &denied).await;
    let url = url_as("noscripts", "pw-noscripts", "acl-denied").await;
    let locks = connect(&url).await.unwrap();
    let started = Instant::now();
    let refused = locks.try_lock("k").await;
    let error = refused.expect_err("a user without scripts took a lock");
    let says = ["ACL does not allow", "Redis at 127.0.0.1:"];
    let text = assert_refused(&error, Refused::PermissionDenied, &says);
    assert!(!text.contains("pw-noscripts"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused only after {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_denied_inside_a_script_is_a_clear_error_too() {
    // Scripts allowed, but not the server clock they read.
    acl_user("notime", "pw-notime", "*", &["&*", "+@all", "-time"]).await;
    let url = url_as("notime", "pw-notime", "acl-notime").await;
    let locks = connect(&url).await.unwrap();
    // A read lock reads the clock in the acquire script.
    let error = locks
        .rwlock("k")
        .unwrap()
        .try_read()
        .await
        .expect_err("a script ran a denied command");
    assert_refused(&error, Refused::PermissionDenied, &["ACL does not allow"]);
}

/// A user confined to one namespace's keys (`~distlock:{tenant:*`: every
/// key of a lock, and the namespace's fencing counter, starts with
/// `distlock:{<namespace>:`) takes and hands over locks there, read
/// locks and permits too, purges the namespace, and gets a clear error at
/// once in another namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_confined_to_a_namespace_locks_there_and_nowhere_else() {
    let (a, b) = lockers_with_lock_rights("tenant", "distlock:{acl-tenant:*", "acl-tenant").await;
    hand_over(&a, &b, "k").await;
    let read = a.rwlock("r").unwrap().read().await.unwrap();
    let permit = a.semaphore("s", 2).unwrap().acquire().await.unwrap();
    a.purge_namespace().await.unwrap();
    let left: Vec<String> = ::redis::cmd("KEYS")
        .arg("distlock:{acl-tenant:*")
        .query_async(&mut raw_redis().await)
        .await
        .unwrap();
    assert_eq!(left, Vec::<String>::new(), "the purge left keys");
    drop((read, permit));

    let elsewhere = url_as("tenant", "pw-tenant", "acl-other").await;
    let locks = connect(&elsewhere).await.unwrap();
    let started = Instant::now();
    let error = locks
        .try_lock("k")
        .await
        .expect_err("a lock outside the user's keys");
    assert_refused(&error, Refused::PermissionDenied, &["ACL does not allow"]);
    assert!(started.elapsed() < Duration::from_secs(1));
}
