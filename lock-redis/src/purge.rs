//! Removing every key of a namespace (`Backend::purge_namespace`).
//!
//! Every key of a namespace, lock and counter alike, starts with
//! `distlock:{<ns>:` and no key of another namespace does (see
//! [`keys`](crate::keys)), so a purge is `SCAN … MATCH distlock:{<ns>:*`
//! on each master (the server, the master the sentinels name, each master
//! of a cluster, each Redlock master) and an `UNLINK` of what it finds,
//! one command per batch (per slot on a cluster). Glob characters of the
//! namespace are escaped, though namespaces cannot contain any.
//!
//! `SCAN` returns every key that exists for the whole scan, so a purge
//! removes everything of a namespace nobody uses; keys made while it runs
//! may stay. Holders of purged locks find their keys gone at their next
//! renewal and report the loss.

use lock_core::{LockError, Namespace};
use redis::Value;

use crate::conn::Conn;
use crate::deadline::Timeouts;

/// How many keys one `SCAN` call looks at (a hint to the server).
const SCAN_COUNT: usize = 1_000;

/// The `SCAN` pattern of every key of `namespace`.
pub(crate) fn pattern(namespace: &Namespace) -> String {
    let mut pattern = String::from("distlock:{");
    for c in namespace.as_str().chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push_str(":*");
    pattern
}

/// Removes every key of `namespace` from the servers `conn` reaches (every
/// master of a cluster); how many it removed.
pub(crate) async fn purge(
    conn: &Conn,
    timeouts: Timeouts,
    namespace: &Namespace,
) -> Result<u64, LockError> {
    let pattern = pattern(namespace);
    let mut removed = 0;
    match conn {
        Conn::Cluster(..) => {
            for slot in master_slots(conn, timeouts).await? {
                removed += purge_on(conn, timeouts, &pattern, slot).await?;
            }
        }
        Conn::Single(..) | Conn::Sentinel(_) => {
            removed += purge_on(conn, timeouts, &pattern, 0).await?;
        }
    }
    Ok(removed)
}

/// Scans the master of `slot` (the one server, off a cluster) for keys
/// matching `pattern` and unlinks them, batch by batch.
async fn purge_on(
    conn: &Conn,
    timeouts: Timeouts,
    pattern: &str,
    slot: u16,
) -> Result<u64, LockError> {
    let mut cursor = String::from("0");
    let mut removed = 0;
    loop {
        let mut scan = redis::cmd("SCAN");
        scan.arg(&cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let (next, keys): (String, Vec<Vec<u8>>) = conn
            .query_on_slot(timeouts, "scan a namespace's keys", &scan, slot)
            .await?;
        // A page may match nothing (the cursor still moves on).
        for group in conn
            .script_groups(&keys)
            .into_iter()
            .filter(|g| !g.is_empty())
        {
            let mut unlink = redis::cmd("UNLINK");
            for &i in &group {
                unlink.arg(&keys[i]);
            }
            let gone: u64 = conn
                .query(timeouts, "remove a namespace's keys", &unlink)
                .await?;
            removed += gone;
        }
        if next == "0" {
            return Ok(removed);
        }
        cursor = next;
    }
}

/// One slot of each master of the cluster, from `CLUSTER SLOTS`: a
/// command routed to a slot's master reaches that master.
async fn master_slots(conn: &Conn, timeouts: Timeouts) -> Result<Vec<u16>, LockError> {
    let reply: Value = conn
        .query(
            timeouts,
            "list the cluster's masters",
            redis::cmd("CLUSTER").arg("SLOTS"),
        )
        .await?;
    let slots = first_slot_per_master(reply);
    if slots.is_empty() {
        return Err(LockError::backend(
            "list the cluster's masters",
            "CLUSTER SLOTS named no master",
        ));
    }
    Ok(slots)
}

/// Reads a `CLUSTER SLOTS` reply — ranges `[start, end, [host, port, id,
/// …], replicas…]` — into the first slot of each master (told apart by
/// id, or by address where the id is missing).
fn first_slot_per_master(reply: Value) -> Vec<u16> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    let mut seen = Vec::new();
    let mut slots = Vec::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        let mut fields = fields.into_iter();
        let start = fields
            .next()
            .and_then(|v| redis::from_redis_value::<u16>(v).ok());
        let _end = fields.next();
        let master = fields
            .next()
            .and_then(|v| redis::from_redis_value::<Vec<Value>>(v).ok())
            .map(|node| {
                let text = |v: &Value| redis::from_redis_value_ref::<String>(v).ok();
                let id = node.get(2).and_then(text);
                let address = node.first().and_then(text).zip(node.get(1).and_then(text));
                id.or_else(|| address.map(|(host, port)| format!("{host}:{port}")))
            });
        if let (Some(start), Some(Some(master))) = (start, master) {
            if !seen.contains(&master) {
                seen.push(master);
                slots.push(start);
            }
        }
    }
    slots
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn range(start: i64, end: i64, host: &str, port: i64, id: Option<&str>) -> Value {
        let mut node = vec![text(host), Value::Int(port)];
        node.extend(id.map(text));
        Value::Array(vec![Value::Int(start), Value::Int(end), Value::Array(node)])
    }

    #[test]
    fn the_pattern_is_the_namespaces_prefix() {
        let ns = Namespace::new("billing.eu-1").unwrap();
        assert_eq!(pattern(&ns), "distlock:{billing.eu-1:*");
    }

    #[test]
    fn one_slot_per_master() {
        let reply = Value::Array(vec![
            range(0, 5460, "127.0.0.1", 7000, Some("a")),
            range(5461, 10922, "127.0.0.1", 7001, Some("b")),
            range(10923, 12000, "127.0.0.1", 7002, Some("c")),
            range(12001, 16383, "127.0.0.1", 7000, Some("a")),
        ]);
        assert_eq!(first_slot_per_master(reply), [0, 5461, 10923]);
        let without_ids = Value::Array(vec![
            range(0, 99, "h", 1, None),
            range(100, 199, "h", 2, None),
            range(200, 16383, "h", 1, None),
        ]);
        assert_eq!(first_slot_per_master(without_ids), [0, 100]);
        assert!(first_slot_per_master(Value::Nil).is_empty());
    }
}
