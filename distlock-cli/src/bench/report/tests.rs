//! The report's figures and table, from made-up measurements.

use super::*;

fn report(probe: Option<&str>) -> BenchResults {
    report_beside(probe, None)
}

fn report_beside(probe: Option<&str>, beside: Option<&str>) -> BenchResults {
    let setup = BenchReport {
        target: Target {
            backend: "file",
            url: "file:///tmp/x".into(),
            namespace: "bench-1".into(),
        },
        clients: 2,
        keys: 1,
        shared: false,
        runtime: "current thread".into(),
        duration: Duration::from_secs(2),
        probe: probe.map(str::to_owned),
        beside: beside.map(str::to_owned),
    };
    let uncontended = Uncontended {
        ours: vec![Duration::from_micros(40); 10],
        floor: vec![Duration::from_micros(10); 10],
        beside: if beside.is_some() {
            vec![Duration::from_micros(5); 10]
        } else {
            Vec::new()
        },
    };
    let counts = Counts {
        per_client: vec![100, 100],
        elapsed: Duration::from_secs(2),
        busy: 0,
        errors: 0,
        first_error: None,
    };
    let floor_counts = probe.map(|_| Counts {
        per_client: vec![400, 400],
        elapsed: Duration::from_secs(2),
        busy: 7,
        errors: 0,
        first_error: None,
    });
    let handoffs = Handovers {
        after_return: vec![Duration::from_millis(1)],
        from_call: vec![Duration::from_millis(2), Duration::from_millis(1)],
        before_return: 1,
    };
    setup.with_results(
        &uncontended,
        &handoffs,
        &ElectionResults::default(),
        &counts,
        floor_counts.as_ref(),
    )
}

#[test]
fn ratios_are_ours_over_floor() {
    let results = report(Some("flock"));
    let floor = results.floor.as_ref().unwrap();
    assert_eq!(floor.p50_ratio, Some(4.0));
    assert_eq!(floor.throughput_ratio, Some(0.25));
    assert_eq!(results.throughput.ops_per_sec, 100.0);
    assert_eq!(results.throughput.fairness, Some(1.0));
}

#[test]
fn table_names_every_measurement() {
    let table = report(Some("flock")).table();
    for part in [
        "backend    file",
        "p50",
        "p99",
        "handoff",
        "throughput",
        "fairness",
        "4.00x",
        "0.25x",
        "40.0µs",
        "1.00ms",
        "1 of 2 were done before release() returned",
        "7 raw attempts found the key held by another client and tried again",
        "n: samples; p50, p99",
        "fairness: Jain's index",
    ] {
        assert!(table.contains(part), "{part} missing in\n{table}");
    }
    let without_floor = report(None).table();
    assert!(without_floor.contains("floor      n/a"), "{without_floor}");
}

#[test]
fn a_recipe_beside_the_floor_gets_its_rows_and_ratio() {
    let results = report_beside(Some("INSERT + DELETE"), Some("advisory pair"));
    let beside = results.floor.as_ref().unwrap().beside.as_ref().unwrap();
    assert_eq!(beside.p50_ratio, Some(8.0));
    let table = results.table();
    for part in [
        "beside     advisory pair",
        "beside the floor",
        "5.0µs",
        "ours/beside",
        "8.00x",
    ] {
        assert!(table.contains(part), "{part} missing in\n{table}");
    }
    let json = serde_json::to_value(&results).unwrap();
    assert_eq!(json["beside"], "advisory pair");
    assert_eq!(json["floor"]["beside"]["uncontended"]["p50_us"], 5.0);
    let without = report(Some("flock")).table();
    assert!(!without.contains("beside"), "{without}");
}

#[test]
fn json_has_flat_setup_and_nested_results() {
    let json = serde_json::to_value(report(None)).unwrap();
    assert_eq!(json["backend"], "file");
    assert_eq!(json["duration_ms"], 2000);
    assert_eq!(json["uncontended"]["p50_us"], 40.0);
    assert_eq!(json["throughput"]["ops"], 200);
    assert!(json["floor"].is_null());
}
