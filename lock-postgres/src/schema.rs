//! The tables, indexes and functions the store keeps in its schema, as SQL
//! text ([`schema_sql`]), and creating them on first use ([`ensure`]).
//!
//! Layout, in schema `<schema>` (option `schema`, default `distlock`):
//!
//! * `sessions`: one row per locker session — `id`, `owner`, `ttl_ms`,
//!   `expires_at` on the **server's** clock. A session is *live* while
//!   `expires_at > now()`.
//! * `entries`: one row per hold or waiting request — `id` (a `bigint`
//!   identity from a sequence that never cycles: the fencing token and
//!   the queue order), `namespace`, `key`, `kind`, `lim` (a permit's
//!   semaphore limit), `owner`, `value`, and `session_id`
//!   (`ON DELETE CASCADE`). Indexed by `(namespace, key, id)` for the
//!   queue order and by `session_id`.
//! * `watchers`: one row per watcher of a key (`namespace`, `key`,
//!   `session_id`, `ON DELETE CASCADE`): keys nobody waits on or watches
//!   are not notified, since PostgreSQL commits notifying transactions one
//!   at a time.
//! * `version`: one row, the layout's version ([`SCHEMA_VERSION`]).
//! * `channel(namespace, key)`: the NOTIFY channel of a key (see
//!   [`crate::channel`], which computes the same name in Rust).
//! * `ahead_of(namespace, key, id, kind, lim)`: the grant rule — NULL
//!   when an entry of that kind and id holds, else the live entry it waits
//!   behind. A lock's exclusive entry (`exclusive`: a lock, a leadership,
//!   a write lock) holds when no live lock entry (`exclusive` or `read`) is
//!   older; a `read` entry when no live `exclusive` one is older; a
//!   `permit` when fewer than `lim` live permits of the key are older. A
//!   key's lock and its semaphore are separate queues.
//! * `holds(namespace, key, token)`: true only while that entry exists in
//!   a live session and holds by the rule above, for fencing inside the
//!   database.
//! * `enqueue(...)`: the acquire statement (see [`crate::statements`]);
//!   an entry granted at once notifies its key if it has watchers; a
//!   permit asked under another limit than the live permits of its key is
//!   not inserted, and the limit they hold under is returned.
//! * `release(id, session)`: deletes an entry, notifying its key if a
//!   later entry waits or a watcher is signed up.
//! * `watch(session, namespace, key)`: signs a watcher up.
//!
//! `enqueue`, `release` and `watch` take the key's advisory lock
//! (`pg_advisory_xact_lock` of a hash of namespace and key) before they
//! read: the entries of a key are numbered and committed in turn, and a
//! release or an acquire sees every waiter and watcher that signed up
//! before it, while one that signs up after sees its change.
//!
//! The functions are PL/pgSQL: a server connection plans each of their
//! statements once and reuses the plan (a SQL-language function called
//! from another is planned again at every call, about 1 ms here: more
//! than the rest of an acquire).
//!
//! Creation runs in one transaction under `pg_advisory_xact_lock`, so
//! processes starting at once create the layout once; every statement is
//! idempotent (`IF NOT EXISTS`, `CREATE OR REPLACE`).

use lock_core::LockError;
use tokio_postgres::Client;

use crate::errors::{db_error, unavailable};

/// The version of the layout this crate creates and expects.
pub const SCHEMA_VERSION: i32 = 1;

/// The schema name used when the `schema` option is absent.
pub const DEFAULT_SCHEMA: &str = "distlock";

/// The advisory lock (`pg_advisory_xact_lock`) held while the layout is
/// created: a constant, the same in every process (`distlock` in ASCII).
const CREATION_LOCK: i64 = 0x6469_7374_6c6f_636b;

/// A schema name: lowercase ASCII letters, digits and `_`, not starting
/// with a digit, at most 63 bytes — so it needs no quoting rules beyond
/// double quotes and is the same name PostgreSQL folds it to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaName(String);

impl SchemaName {
    /// Checks `name`; the error says which rule it breaks.
    pub fn new(name: &str) -> Result<Self, String> {
        let first_ok = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
        if name.is_empty() || name.len() > 63 {
            return Err(format!("`{name}` must be 1 to 63 bytes long"));
        }
        if !first_ok
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            return Err(format!(
                "`{name}` is not a plain identifier (lowercase letters, digits and `_`, \
                 not starting with a digit)"
            ));
        }
        if name.starts_with("pg_") {
            return Err(format!("`{name}`: names starting with pg_ are reserved"));
        }
        Ok(Self(name.to_owned()))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name quoted for SQL text (`"distlock"`).
    pub(crate) fn quoted(&self) -> String {
        format!("\"{}\"", self.0)
    }
}

impl Default for SchemaName {
    fn default() -> Self {
        Self(DEFAULT_SCHEMA.to_owned())
    }
}

/// The SQL that creates (or completes) the layout in `schema`: the text
/// the store runs on first use, for operators who create it by hand (then use
/// `create_schema=false`). Idempotent: running it twice changes nothing.
pub fn schema_sql(schema: &SchemaName) -> String {
    TEMPLATE
        .replace(
            "{key_lock(p_namespace, p_key)}",
            &key_lock("p_namespace", "p_key"),
        )
        .replace(
            "{key_lock(v_namespace, v_key)}",
            &key_lock("v_namespace", "v_key"),
        )
        .replace("{s}", &schema.quoted())
        .replace("{name}", schema.as_str())
        .replace("{version}", &SCHEMA_VERSION.to_string())
}

/// The key's advisory lock, taken by `enqueue`, `release` and `watch` on
/// the key named by the PL/pgSQL variables `namespace` and `key`: one
/// expression, so that all three take the same lock.
fn key_lock(namespace: &str, key: &str) -> String {
    format!(
        "pg_advisory_xact_lock(hashtextextended(\n        \
         octet_length({namespace}) || ':' || {namespace} || {key}, 0))"
    )
}

/// The layout. `{s}` is the quoted schema; `{key_lock(…)}` is [`key_lock`]. Kept in one place so the
/// statements the store runs and the text operators see cannot differ.
const TEMPLATE: &str = r#"CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.version (
    single boolean PRIMARY KEY DEFAULT true CHECK (single),
    version integer NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.sessions (
    id bigint GENERATED ALWAYS AS IDENTITY (NO CYCLE) PRIMARY KEY,
    owner text NOT NULL,
    ttl_ms bigint NOT NULL CHECK (ttl_ms > 0),
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_expires_at ON {s}.sessions (expires_at);
CREATE TABLE IF NOT EXISTS {s}.entries (
    id bigint GENERATED ALWAYS AS IDENTITY (NO CYCLE) PRIMARY KEY,
    namespace text NOT NULL,
    key text NOT NULL,
    kind text NOT NULL CHECK (kind IN ('exclusive', 'read', 'permit')),
    lim integer,
    owner text NOT NULL,
    value text NOT NULL DEFAULT '',
    session_id bigint NOT NULL REFERENCES {s}.sessions (id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS entries_queue ON {s}.entries (namespace, key, id);
CREATE INDEX IF NOT EXISTS entries_session ON {s}.entries (session_id);
CREATE TABLE IF NOT EXISTS {s}.watchers (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace text NOT NULL,
    key text NOT NULL,
    session_id bigint NOT NULL REFERENCES {s}.sessions (id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS watchers_key ON {s}.watchers (namespace, key);
CREATE INDEX IF NOT EXISTS watchers_session ON {s}.watchers (session_id);
CREATE OR REPLACE FUNCTION {s}.channel(p_namespace text, p_key text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $fn$
    SELECT 'distlock_' || left(encode(sha256(convert_to(
        '{name}:' || octet_length(p_namespace) || ':' || p_namespace || p_key, 'UTF8')), 'hex'), 40)
$fn$;
CREATE OR REPLACE FUNCTION {s}.ahead_of(
    p_namespace text, p_key text, p_id bigint, p_kind text, p_lim integer)
RETURNS bigint LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    v_count bigint;
    v_newest bigint;
BEGIN
    IF p_kind = 'permit' THEN
        SELECT count(*), max(e.id) INTO v_count, v_newest
        FROM {s}.entries e JOIN {s}.sessions s ON s.id = e.session_id
        WHERE e.namespace = p_namespace AND e.key = p_key AND e.id < p_id
          AND e.kind = 'permit' AND s.expires_at > now();
        RETURN CASE WHEN v_count < p_lim THEN NULL ELSE v_newest END;
    END IF;
    SELECT max(e.id) INTO v_newest
    FROM {s}.entries e JOIN {s}.sessions s ON s.id = e.session_id
    WHERE e.namespace = p_namespace AND e.key = p_key AND e.id < p_id
      AND e.kind <> 'permit' AND (p_kind <> 'read' OR e.kind <> 'read')
      AND s.expires_at > now();
    RETURN v_newest;
END
$fn$;
CREATE OR REPLACE FUNCTION {s}.holds(p_namespace text, p_key text, p_token bigint)
RETURNS boolean LANGUAGE plpgsql STABLE STRICT AS $fn$
BEGIN
    RETURN EXISTS (
        SELECT 1 FROM {s}.entries e JOIN {s}.sessions s ON s.id = e.session_id
        WHERE e.id = p_token AND e.namespace = p_namespace AND e.key = p_key
          AND s.expires_at > now()
          AND {s}.ahead_of(p_namespace, p_key, p_token, e.kind, e.lim) IS NULL);
END
$fn$;
CREATE OR REPLACE FUNCTION {s}.enqueue(
    p_session bigint, p_namespace text, p_key text, p_kind text, p_lim integer,
    p_owner text, p_value text,
    OUT id bigint, OUT ahead bigint, OUT other_limit integer)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
BEGIN
    -- Entries of one key are numbered one transaction at a time, and each
    -- statement below takes a fresh snapshot: every entry with a smaller
    -- id on the key has committed (or rolled back) before we read.
    PERFORM {key_lock(p_namespace, p_key)};
    -- A semaphore's permits are all taken under one limit.
    IF p_kind = 'permit' THEN
        SELECT e.lim INTO other_limit
        FROM {s}.entries e JOIN {s}.sessions s ON s.id = e.session_id
        WHERE e.namespace = p_namespace AND e.key = p_key AND e.kind = 'permit'
          AND e.lim IS DISTINCT FROM p_lim AND s.expires_at > now()
        LIMIT 1;
        IF other_limit IS NOT NULL THEN
            RETURN;
        END IF;
    END IF;
    INSERT INTO {s}.entries (namespace, key, kind, lim, owner, value, session_id)
    SELECT p_namespace, p_key, p_kind, p_lim, p_owner, p_value, p_session
    WHERE EXISTS (SELECT 1 FROM {s}.sessions WHERE sessions.id = p_session
                  AND expires_at > clock_timestamp())
    RETURNING entries.id INTO id;
    IF id IS NULL THEN
        RETURN;
    END IF;
    IF p_kind = 'exclusive' THEN
        -- ahead_of's rule for an exclusive entry, inline (the usual case).
        SELECT max(e.id) INTO ahead
        FROM {s}.entries e JOIN {s}.sessions s ON s.id = e.session_id
        WHERE e.namespace = p_namespace AND e.key = p_key AND e.id < enqueue.id
          AND e.kind <> 'permit' AND s.expires_at > now();
    ELSE
        ahead := {s}.ahead_of(p_namespace, p_key, enqueue.id, p_kind, p_lim);
    END IF;
    -- A new holder: tell the key's watchers, if any (a notifying commit
    -- waits for every other notifying commit of the server).
    IF ahead IS NULL AND EXISTS (SELECT 1 FROM {s}.watchers w
                                 WHERE w.namespace = p_namespace AND w.key = p_key) THEN
        PERFORM pg_notify({s}.channel(p_namespace, p_key), id::text);
    END IF;
END
$fn$;
CREATE OR REPLACE FUNCTION {s}.release(p_id bigint, p_session bigint,
    OUT deleted bigint, OUT live boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_namespace text;
    v_key text;
BEGIN
    deleted := 0;
    SELECT e.namespace, e.key INTO v_namespace, v_key FROM {s}.entries e
    WHERE e.id = p_id AND e.session_id = p_session;
    IF FOUND THEN
        -- In turn with the key's acquires and watchers' sign-ups: one that
        -- committed before is seen below; one after sees this entry gone.
        PERFORM {key_lock(v_namespace, v_key)};
        DELETE FROM {s}.entries e WHERE e.id = p_id AND e.session_id = p_session;
        GET DIAGNOSTICS deleted = ROW_COUNT;
        -- Notified only for someone to tell: a later entry, a watcher.
        IF deleted > 0 AND (EXISTS (SELECT 1 FROM {s}.entries e
                                    WHERE e.namespace = v_namespace AND e.key = v_key
                                      AND e.id > p_id)
                            OR EXISTS (SELECT 1 FROM {s}.watchers w
                                       WHERE w.namespace = v_namespace
                                         AND w.key = v_key)) THEN
            -- A deletion's payload is the id negated (see crate::listen).
            PERFORM pg_notify({s}.channel(v_namespace, v_key), (-p_id)::text);
        END IF;
    END IF;
    live := EXISTS (SELECT 1 FROM {s}.sessions s
                    WHERE s.id = p_session AND s.expires_at > now());
END
$fn$;
CREATE OR REPLACE FUNCTION {s}.watch(p_session bigint, p_namespace text, p_key text)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_id bigint;
BEGIN
    -- In turn with the key's acquires and releases: one that committed
    -- before is in the watcher's first read; one after sees the watcher.
    PERFORM {key_lock(p_namespace, p_key)};
    INSERT INTO {s}.watchers (namespace, key, session_id)
    VALUES (p_namespace, p_key, p_session) RETURNING id INTO v_id;
    RETURN v_id;
END
$fn$;
INSERT INTO {s}.version (single, version) VALUES (true, {version})
    ON CONFLICT (single) DO NOTHING;
"#;

/// The tables the store needs, in the order a missing one is reported.
const TABLES: [&str; 4] = ["version", "sessions", "entries", "watchers"];

/// Makes sure the layout of [`SCHEMA_VERSION`] exists in `schema`.
///
/// With `create`, a missing or older layout is created in one
/// transaction under an advisory lock (concurrent start-ups create it
/// once). Without it, a missing table is an error naming it. A newer
/// layout than this crate knows is refused either way.
pub(crate) async fn ensure(
    client: &Client,
    schema: &SchemaName,
    create: bool,
) -> Result<(), LockError> {
    match installed_version(client, schema).await? {
        Ok(version) if version == SCHEMA_VERSION => return Ok(()),
        Ok(version) if version > SCHEMA_VERSION => {
            return Err(LockError::invalid_config(format!(
                "schema {} has layout version {version}, newer than this client's \
                 {SCHEMA_VERSION}: upgrade distlock",
                schema.quoted()
            )))
        }
        Ok(_) => {}
        Err(missing) if !create => {
            return Err(LockError::invalid_config(format!(
                "table {}.{missing} does not exist and create_schema=false: create the \
                 layout (distlock's schema SQL) or allow create_schema",
                schema.quoted()
            )))
        }
        Err(_) => {}
    }
    // One simple-query message: one implicit transaction, so the advisory
    // lock is held until everything is created, and an error rolls it all
    // back without leaving the connection inside a failed transaction.
    let batch = format!(
        "SELECT pg_advisory_xact_lock({CREATION_LOCK});\n{}",
        schema_sql(schema)
    );
    client
        .batch_execute(&batch)
        .await
        .map_err(|e| db_error("cannot create the store's tables", e))
}

/// The layout version in `schema`, or the name of the first missing table.
async fn installed_version(
    client: &Client,
    schema: &SchemaName,
) -> Result<Result<i32, &'static str>, LockError> {
    use tokio_postgres::types::Type;
    let names: Vec<String> = TABLES
        .iter()
        .map(|table| format!("{}.{table}", schema.quoted()))
        .collect();
    // One boolean per table, in TABLES' order.
    let row = client
        .query_typed(
            "SELECT ARRAY(SELECT to_regclass(t) IS NOT NULL FROM unnest($1::text[]) t)",
            &[(&names, Type::TEXT_ARRAY)],
        )
        .await
        .map_err(|e| unavailable("cannot read the store's tables", e))?;
    let row = row
        .first()
        .ok_or_else(|| LockError::backend("no reply", "empty result"))?;
    let present: Vec<bool> = row.get(0);
    for (table, present) in TABLES.iter().zip(present) {
        if !present {
            return Ok(Err(*table));
        }
    }
    let sql = format!("SELECT version FROM {}.version", schema.quoted());
    let rows = client
        .query_typed(&sql, &[])
        .await
        .map_err(|e| db_error("cannot read the layout version", e))?;
    Ok(Ok(rows.first().map(|r| r.get::<_, i32>(0)).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        assert_eq!(SchemaName::new("distlock").unwrap().as_str(), "distlock");
        assert_eq!(SchemaName::new("_a1").unwrap().quoted(), "\"_a1\"");
        for bad in ["", "1a", "A", "a-b", "a\"b", "pg_x", &"a".repeat(64)] {
            assert!(SchemaName::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_sql_names_the_schema_everywhere() {
        let sql = schema_sql(&SchemaName::new("locks_x").unwrap());
        assert!(!sql.contains("{s}") && !sql.contains("{name}") && !sql.contains("{version}"));
        assert!(sql.contains("CREATE TABLE IF NOT EXISTS \"locks_x\".entries"));
        assert!(sql.contains("GENERATED ALWAYS AS IDENTITY (NO CYCLE)"));
        assert!(!sql.contains("\"distlock\""));
    }
}
