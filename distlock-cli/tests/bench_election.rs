//! The election rows of `distlock bench`: failover after resign and after
//! a crash, and observe latency, on a file store and on memory.

mod common;

use common::{assert_rows, output, stderr, stdout, Store};
use serde_json::Value;

/// A short `bench --json` on `url`, which must succeed.
fn bench_json(url: &str) -> Value {
    let args = ["bench", "--duration", "300ms", "--clients", "2", "--json"];
    let out = output(common::distlock_at(url, &args));
    assert!(out.status.success(), "bench on {url}: {}", stderr(&out));
    serde_json::from_str(&stdout(&out)).expect("bench --json is JSON")
}

/// `latency` is a measured distribution of at least `n` samples, each
/// figure positive (or zero) and p50 <= p99.
fn assert_latency(json: &Value, latency: &Value, n: u64) {
    assert!(latency["n"].as_u64() >= Some(n), "{latency}\n{json}");
    let figure = |name: &str| {
        let value = latency[name].as_f64().unwrap_or(-1.0);
        assert!(value >= 0.0, "{name}: {latency}\n{json}");
        value
    };
    assert!(figure("p50_us") <= figure("p99_us"), "{latency}");
    figure("mean_us");
}

/// `row` has a measured floor of at least `n` samples, taken by `probe`,
/// and a ratio to it.
fn assert_floor(json: &Value, row: &Value, n: u64, probe: &str) {
    assert_latency(json, &row["floor"], n);
    assert_eq!(row["floor_probe"], probe, "{json}");
    assert!(row["p50_ratio"].as_f64() > Some(0.0), "{json}");
}

/// The failover row's hand-overs: at least `n` from the resign call, each
/// either after the call returned (in `ours`) or counted as done before.
fn assert_handovers(json: &Value, failover: &Value, n: u64) {
    assert_latency(json, &failover["from_resign_call"], n);
    let all = failover["from_resign_call"]["n"].as_u64().unwrap();
    let after = failover["ours"]["n"].as_u64().unwrap_or(0);
    let before = failover["before_resign_returned"].as_u64().unwrap();
    assert_eq!(after + before, all, "{json}");
    if after > 0 {
        assert_latency(json, &failover["ours"], 1);
    }
}

/// The median of `slower` is no shorter than that of `faster`, for the
/// reason `why`.
fn assert_p50_not_below(json: &Value, slower: &Value, faster: &Value, why: &str) {
    let p50 = |latency: &Value| latency["p50_us"].as_f64();
    assert!(p50(slower) >= p50(faster), "{why}: {json}");
}

#[test]
fn the_file_store_reports_failover_and_observe_beside_their_floors() {
    let store = Store::new();
    let json = bench_json(&store.url);
    let election = &json["election"];

    let failover = &election["failover"];
    assert!(failover["error"].is_null(), "{json}");
    assert_handovers(&json, failover, 10);
    assert_p50_not_below(
        &json,
        &failover["from_resign_call"],
        &failover["ours"],
        "counted from earlier, the hand-over cannot be shorter",
    );
    assert_floor(&json, failover, 10, "open + flock + unlock + close");
    let handoff = &failover["handoff_floor"];
    assert_floor(
        &json,
        handoff,
        10,
        "flock(LOCK_UN) -> a thread blocked in flock(LOCK_EX) returns",
    );

    // A file lock lasts as long as its process: the crashed leader is a
    // killed `distlock elect`, and its lock is free as soon as it is dead.
    let crash = &election["crash_failover"];
    assert_eq!(crash["crash"], "killed process", "{json}");
    assert!(crash["error"].is_null(), "{json}");
    assert_latency(&json, &crash["ours"], 3);
    let p99 = crash["ours"]["p99_us"].as_f64().unwrap();
    assert!(p99 < 1_000e3, "no ttl to wait for: {json}");
    assert!(crash["beyond_ttl_p50_us"].is_null(), "{json}");

    let observe = &election["observe"];
    assert!(observe["error"].is_null(), "{json}");
    assert_eq!(observe["observers"], 16);
    assert_latency(&json, &observe["all_observers"], 10);
    assert_latency(&json, &observe["per_observer"], 160);
    assert_eq!(
        observe["per_observer"]["n"].as_u64().map(|n| n / 16),
        observe["all_observers"]["n"].as_u64(),
        "{json}"
    );
    assert_p50_not_below(
        &json,
        &observe["all_observers"],
        &observe["per_observer"],
        "the slowest observer of a change is no faster than the median one",
    );
    assert_floor(&json, observe, 10, "stat");
    // A file watch is its own floor: no raw notify recipe.
    assert!(observe["raw_notify_floor"].is_null(), "{json}");
}

#[test]
fn memory_fails_over_after_a_crash_within_about_the_ttl() {
    let json = bench_json("mem://");
    let election = &json["election"];
    let crash = &election["crash_failover"];
    assert!(crash["error"].is_null(), "{json}");
    assert_eq!(crash["crash"], "leaked guard", "{json}");
    assert_eq!(crash["ttl_ms"], 1000);
    assert_latency(&json, &crash["ours"], 3);
    // Measured from the leak, a few milliseconds after the lease began:
    // just under the ttl, and not much later than its end.
    let p50 = crash["ours"]["p50_us"].as_f64().unwrap();
    assert!((900e3..2_000e3).contains(&p50), "{json}");
    let beyond = crash["beyond_ttl_p50_us"].as_f64().unwrap();
    assert!((0.0..1_000e3).contains(&beyond), "{json}");
    assert!(
        crash["beyond_ttl_p99_us"].as_f64() >= Some(beyond),
        "{json}"
    );

    // No raw floor on memory: the rows stand alone.
    for row in ["failover", "observe"] {
        assert!(election[row]["error"].is_null(), "{json}");
        assert!(election[row]["floor"].is_null(), "{json}");
        assert!(election[row]["p50_ratio"].is_null(), "{json}");
    }
    assert!(election["observe"]["raw_notify_floor"].is_null(), "{json}");
    assert_handovers(&json, &election["failover"], 10);
    assert_latency(&json, &election["observe"]["all_observers"], 10);
}

#[test]
fn the_table_has_the_election_rows() {
    let store = Store::new();
    let args = ["bench", "--duration", "300ms", "--clients", "2"];
    let out = output(store.distlock(&args));
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert_rows(
        &text,
        &[
            "election",
            "failover (resign)",
            "from resign call",
            "floor (lock+release)",
            "failover (crash)",
            "observe (all 16)",
            "observe (each)",
            "floor (1 round trip)",
        ],
    );
}
