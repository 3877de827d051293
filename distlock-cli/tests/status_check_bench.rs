//! `status`, `check` and `bench` against a file store.

mod common;

use common::{output, signal, stderr, stdout, wait, wait_for, Store};

#[test]
fn status_reports_free_then_held_by_the_running_holder() {
    let store = Store::new();
    let free = output(store.distlock(&["status", "jobs/nightly"]));
    assert!(free.status.success(), "{}", stderr(&free));
    let asked = format!("asked file store {}, namespace default", store.url);
    assert_eq!(stdout(&free).trim(), format!("jobs/nightly: free\n{asked}"));

    let ready = store.scratch("ready");
    let script = format!("touch {}; exec sleep 5", ready.display());
    let mut holder = store.hold("jobs/nightly", &script, &ready);
    let mut json = serde_json::Value::Null;
    wait_for(
        || {
            let out = output(store.distlock(&["status", "jobs/nightly", "--json"]));
            assert!(out.status.success(), "{}", stderr(&out));
            json = serde_json::from_str(&stdout(&out)).expect("status --json is JSON");
            json["held"] == true
        },
        "status to report the lock held",
    );
    assert_eq!(json["key"], "jobs/nightly");
    assert_eq!(json["namespace"], "default");
    assert_eq!(json["store"], store.url.as_str());
    assert_eq!(json["backend"], "file");
    assert!(json["token"].as_u64().is_some(), "{json}");
    assert!(json.get("ttl_left_ms").is_some(), "{json}");
    let owner = json["owner"].as_str().expect("owner");
    let parts: Vec<&str> = owner.split('/').collect();
    assert_eq!(parts.len(), 3, "owner is hostname/pid/uuid: {owner}");
    assert_eq!(
        parts[1],
        holder.id().to_string(),
        "owner names the holder's pid"
    );

    let text = output(store.distlock(&["status", "jobs/nightly"]));
    assert!(text.status.success());
    let line = stdout(&text);
    let expected = format!("jobs/nightly: held by {owner}, token {}", json["token"]);
    assert!(line.starts_with(&expected), "{line}");

    signal(holder.id(), libc::SIGTERM);
    wait(&mut holder);
    let after = output(store.distlock(&["status", "jobs/nightly"]));
    assert_eq!(
        stdout(&after).trim(),
        format!("jobs/nightly: free\n{asked}")
    );
}

#[test]
fn status_of_a_name_shows_its_semaphores_permits_too() {
    let store = Store::new();
    let ready = store.scratch("ready");
    let script = format!("touch {}; exec sleep 5", ready.display());
    let mut holder = store.hold_with("pool", &["--permits", "3"], &script, &ready);
    let out = output(store.distlock(&["status", "pool"]));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "pool: free", "{text}");
    assert_eq!(lines[1], "pool (semaphore): 1 of 3 permits held", "{text}");
    assert!(
        lines[2].starts_with("  ") && lines[2].contains(", token "),
        "{text}"
    );
    let json = output(store.distlock(&["status", "pool", "--json"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(json["held"], false, "{json}");
    assert_eq!(json["permit_holders"][0]["kind"], "permit", "{json}");
    signal(holder.id(), libc::SIGTERM);
    wait(&mut holder);
}

#[test]
fn check_passes_on_the_file_backend() {
    let store = Store::new();
    common::assert_check_passes(&store.url, "file");
}

#[test]
fn bench_prints_latency_handoff_throughput_and_fairness() {
    let store = Store::new();
    let out = output(store.distlock(&["bench", "--duration", "1s", "--clients", "4"]));
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "bench failed:\n{text}\n{}",
        stderr(&out)
    );
    for header in [
        "backend    file",
        "clients    4",
        "keys       1",
        "duration   1s",
        "floor      ",
    ] {
        assert!(text.contains(header), "{header:?} missing:\n{text}");
    }
    let row = |label: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("no {label:?} row:\n{text}"))
            .to_owned()
    };
    let latency_header = row("latency");
    assert!(
        latency_header.contains("p50") && latency_header.contains("p99"),
        "{text}"
    );
    assert!(
        row("lock+release").contains("µs") || row("lock+release").contains("ms"),
        "{text}"
    );
    row("handoff");
    let throughput_header = row("throughput");
    assert!(
        throughput_header.contains("ops/s") && throughput_header.contains("fairness"),
        "{text}"
    );
    row("ours/floor");
}

#[test]
fn bench_keeps_to_its_duration_explains_its_columns_and_leaves_nothing() {
    let store = Store::new();
    let started = std::time::Instant::now();
    let out = output(store.distlock(&["bench", "--duration", "3s", "--clients", "4"]));
    let took = started.elapsed();
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    // The whole run is --duration; connecting, the crash failover's ttl
    // and the clean-up come on top.
    assert!(
        took < std::time::Duration::from_secs(6),
        "took {took:?}:\n{text}"
    );
    let legends = [
        "n: samples",
        "ours/floor: ",
        "from release call: ",
        "fairness: Jain's",
    ];
    common::assert_mentions_each(&text, &legends);
    assert!(!text.contains(" 0.0µs"), "a clamped zero:\n{text}");
    assert!(!text.contains("probe calls failed"), "{text}");
    assert_eq!(stderr(&out), "", "warnings");
    let left: Vec<_> = std::fs::read_dir(store.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "bench left {left:?} in the store");
}

#[test]
fn bench_json_has_every_number() {
    let store = Store::new();
    let out = output(store.distlock(&[
        "bench",
        "--duration",
        "500ms",
        "--clients",
        "2",
        "--keys",
        "3",
        "--json",
    ]));
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&out)).expect("bench --json is JSON");
    assert_eq!(json["backend"], "file");
    assert_eq!(json["clients"], 2);
    assert_eq!(json["keys"], 3);
    assert_eq!(json["duration_ms"], 500);
    assert!(json["namespace"].as_str().unwrap().starts_with("bench-"));
    for section in ["uncontended", "handoff"] {
        for field in ["n", "p50_us", "p99_us", "mean_us"] {
            assert!(
                json[section][field].is_number(),
                "{section}.{field}: {json}"
            );
        }
    }
    for field in ["ops", "ops_per_sec", "fairness"] {
        assert!(
            json["throughput"][field].is_number(),
            "throughput.{field}: {json}"
        );
    }
    assert_eq!(
        json["throughput"]["per_client"].as_array().unwrap().len(),
        2
    );
    let floor = &json["floor"];
    assert!(floor["p50_ratio"].is_number(), "{json}");
    assert!(floor["throughput"]["ops_per_sec"].is_number(), "{json}");
    // The lock metrics of the run, under the names services export.
    let metrics = json["metrics"].as_object().expect("metrics in the report");
    let acquisitions: f64 = metrics
        .iter()
        .filter(|(series, _)| series.starts_with("distlock_acquisitions_total{"))
        .filter_map(|(_, value)| value.as_f64())
        .sum();
    assert!(acquisitions > 100.0, "{json}");
}

#[test]
fn bench_on_memory_says_the_floor_is_not_available() {
    let out = output(common::distlock_at(
        "mem://",
        &["bench", "--duration", "300ms", "--clients", "2"],
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("floor      n/a"), "{}", stdout(&out));
}

#[test]
fn bench_hold_reports_what_holding_locks_costs() {
    let store = Store::new();
    let out = output(store.distlock(&["bench", "--hold", "200", "--hold-for", "1s", "--json"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&out)).expect("bench --hold --json is JSON");
    assert_eq!(json["backend"], "file");
    assert!(json["namespace"].as_str().unwrap().starts_with("bench-"));
    assert!(json["ttl_ms"].is_number(), "{json}");
    let hold = &json["hold"];
    assert_eq!(hold["locks"], 200, "{json}");
    assert_eq!(hold["lost"], 0, "{json}");
    let window = hold["window_ms"].as_f64().expect("window_ms");
    assert!((1000.0..5000.0).contains(&window), "{json}");
    assert!(hold["acquire_ms"].is_number(), "{json}");
    let measured = [
        "write_syscalls",
        "write_syscalls_per_sec",
        "bytes_written",
        "bytes_written_per_sec",
        "rss_before_bytes",
        "rss_after_bytes",
        "rss_per_lock_bytes",
    ];
    for field in measured {
        if cfg!(target_os = "linux") {
            assert!(hold[field].is_number(), "hold.{field}: {json}");
        } else {
            assert!(hold[field].is_null(), "hold.{field}: {json}");
        }
    }
    // The throughput measurements do not run alongside.
    assert!(json.get("throughput").is_none(), "{json}");

    // Every lock was released: another process takes one at once.
    let namespace = json["namespace"].as_str().unwrap();
    let url = format!("{}?namespace={namespace}", store.url);
    let free = output(common::distlock_at(
        &url,
        &["run", "bench/hold-199", "--wait", "0", "--", "true"],
    ));
    assert!(free.status.success(), "{}", stderr(&free));
}

#[test]
fn bench_hold_table_names_every_number() {
    let out = output(common::distlock_at(
        "mem://",
        &["bench", "--hold", "50", "--hold-for", "200ms"],
    ));
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(text.contains("backend    mem"), "{text}");
    assert!(
        text.contains("holding 50 locks on one locker for "),
        "{text}"
    );
    common::assert_rows(
        &text,
        &[
            "write syscalls/s",
            "bytes written/s",
            "RSS per held lock",
            "lost while held",
        ],
    );
}

/// `--threads` picks the bench's runtime and the report says which one
/// the numbers come from.
#[test]
fn bench_threads_choose_the_runtime_and_the_report_names_it() {
    for (threads, runtime) in [("1", "current thread"), ("3", "3 worker threads")] {
        let out = output(common::distlock_at(
            "mem://",
            &[
                "bench",
                "--duration",
                "300ms",
                "--clients",
                "2",
                "--threads",
                threads,
                "--json",
            ],
        ));
        assert!(out.status.success(), "{}", stderr(&out));
        let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(report["runtime"], runtime, "{report}");
        assert!(
            report["throughput"]["ops"].as_u64().unwrap() > 0,
            "{report}"
        );
    }
    let zero = common::distlock_at("mem://", &["bench", "--threads", "0"])
        .output()
        .unwrap();
    assert_eq!(zero.status.code(), Some(2), "{}", stderr(&zero));
}
