//! The SQL the store runs, written once per backend with its schema name.
//!
//! Every statement is sent with `query_typed` (an unnamed statement with
//! its parameter types, one round trip), never prepared under a name, so
//! all of them work through a transaction-mode pooler such as PgBouncer.
//! Each is one statement: one implicit transaction, so a delete and its
//! `pg_notify` commit together — a notification is never sent for a
//! change that did not commit.
//!
//! *Live* means: in a session whose `expires_at > now()` on the server.
//! An entry is *granted* by the schema's `ahead_of` rule (see
//! [`crate::schema`]): an exclusive one when no older live lock entry of
//! its key is left, a read one when no older live exclusive one is, a
//! permit when fewer than its limit of older live permits are.

use lock_core::HoldKind;

use crate::schema::SchemaName;

/// The `kind` of a lock's exclusive entry: a lock, a leadership, a write lock.
pub(crate) const EXCLUSIVE: &str = "exclusive";
/// The `kind` of a read lock's entry.
pub(crate) const READ: &str = "read";
/// The `kind` of a semaphore permit's entry.
pub(crate) const PERMIT: &str = "permit";

/// The `kind` and `lim` columns of an entry for a hold of `kind`.
pub(crate) fn entry_kind(kind: HoldKind) -> (&'static str, Option<i32>) {
    match kind {
        HoldKind::Shared => (READ, None),
        HoldKind::Permit { limit } => (PERMIT, Some(i32::try_from(limit).unwrap_or(i32::MAX))),
        _ => (EXCLUSIVE, None),
    }
}

/// The statements of one backend; see each field.
#[derive(Debug, Default)]
pub(crate) struct Statements {
    /// `$1 owner text, $2 ttl_ms int8` → `id int8`: opens a session that
    /// expires `ttl` from now.
    pub(crate) open_session: String,
    /// `$1 session int8` → `alive bool, entries int8[]`: extends the
    /// session by its ttl if it is still live (never revives an expired
    /// one), and lists its entries (so the holder notices one removed).
    pub(crate) renew: String,
    /// `$1 session, $2 namespace, $3 key, $4 kind, $5 limit int4,
    /// $6 owner, $7 value` → `id int8, ahead int8, other_limit int4`: the
    /// acquire statement (the `enqueue` function, see [`crate::schema`]).
    /// `other_limit` is set (and nothing inserted) when live permits of
    /// the key hold under another limit; else `id` is NULL when the
    /// session is not live; `ahead` is NULL when the entry is granted,
    /// else the live entry it waits behind.
    pub(crate) enqueue: String,
    /// `$1 namespace, $2 key, $3 entry int8, $4 session int8` →
    /// `mine bool, ahead int8, ahead_alone bool`: whether our entry is
    /// still there in our live session, the live entry it waits behind
    /// (NULL: granted), and whether that entry is the oldest live lock
    /// entry of the key (its deletion then leaves a lock entry behind it
    /// first in line).
    pub(crate) recheck: String,
    /// `$1 entry int8, $2 session int8` → `deleted int8, live bool`:
    /// deletes our entry (the layout's `release` function) and notifies
    /// its key if a later entry or a watcher is there to hear it; `live`
    /// says whether our session was still live (else the lock was lost
    /// before).
    pub(crate) release: String,
    /// `$1 session int8, $2 namespace, $3 key` → `id int8`: signs a
    /// watcher of the key up in the session (the layout's `watch`
    /// function), so that acquires and releases of the key notify it.
    pub(crate) watch: String,
    /// `$1 watcher int8`: signs a watcher off.
    pub(crate) unwatch: String,
    /// `$1 owner text, $2 session int8`: deletes the entries of one
    /// acquisition by its owner id (a cancelled acquire whose reply may
    /// have been lost) and notifies their keys.
    pub(crate) withdraw: String,
    /// `$1 entry int8, $2 session int8` → `present bool`: our entry
    /// exists in our live session.
    pub(crate) check: String,
    /// `$1 entry int8, $2 session int8, $3 value text` → rows updated:
    /// replaces the value of our live entry and notifies its key.
    pub(crate) set_value: String,
    /// → deleted count: removes every expired session and its entries,
    /// notifying each key (any client may do it; locked rows are skipped).
    pub(crate) reap: String,
    /// `$1 namespace, $2 key, $3 kinds text[]` → `id, owner, value,
    /// ttl_left_ms, kind, lim`: the granted live entries of those kinds
    /// (`exclusive` and `read` for the lock, `permit` for the semaphore),
    /// oldest first.
    pub(crate) holders: String,
    /// `$1 namespace, $2 key` → deleted count: removes the lock's granted
    /// entries (its exclusive holder, or its readers), notifying the key.
    pub(crate) force_release: String,
    /// `$1 namespace` → deleted count: removes every entry of the
    /// namespace, notifying each key.
    pub(crate) purge: String,
    /// `$1 sessions int8[]` → deleted count: removes the sessions and
    /// their entries, notifying each key.
    pub(crate) close_sessions: String,
}

impl Statements {
    /// The statements for tables in `schema`.
    pub(crate) fn new(schema: &SchemaName) -> Self {
        let s = schema.quoted();
        let s = s.as_str();
        Self {
            open_session: format!(
                "INSERT INTO {s}.sessions (owner, ttl_ms, expires_at) \
                 VALUES ($1, $2, now() + $2 * interval '1 millisecond') RETURNING id"
            ),
            renew: format!(
                "WITH renewed AS (UPDATE {s}.sessions \
                 SET expires_at = now() + ttl_ms * interval '1 millisecond' \
                 WHERE id = $1 AND expires_at > now() RETURNING id) \
                 SELECT EXISTS (SELECT 1 FROM renewed), \
                 ARRAY(SELECT id FROM {s}.entries WHERE session_id = $1)"
            ),
            release: format!("SELECT deleted, live FROM {s}.release($1, $2)"),
            watch: format!("SELECT {s}.watch($1, $2, $3)"),
            unwatch: format!("DELETE FROM {s}.watchers WHERE id = $1"),
            enqueue: format!(
                "SELECT id, ahead, other_limit FROM {s}.enqueue($1, $2, $3, $4, $5, $6, $7)"
            ),
            recheck: format!(
                "WITH a AS (SELECT {s}.ahead_of($1, $2, e.id, e.kind, e.lim) AS ahead \
                 FROM {s}.entries e WHERE e.id = $3) \
                 SELECT EXISTS (SELECT 1 FROM {s}.entries e JOIN {s}.sessions ss \
                 ON ss.id = e.session_id WHERE e.id = $3 AND e.session_id = $4 \
                 AND ss.expires_at > now()), (SELECT ahead FROM a), \
                 EXISTS (SELECT 1 FROM a WHERE a.ahead IS NOT NULL AND NOT EXISTS \
                 (SELECT 1 FROM {s}.entries o JOIN {s}.sessions os ON os.id = o.session_id \
                 WHERE o.namespace = $1 AND o.key = $2 AND o.id < a.ahead \
                 AND o.kind <> 'permit' AND os.expires_at > now()))"
            ),
            check: format!(
                "SELECT EXISTS (SELECT 1 FROM {s}.entries e WHERE e.id = $1 \
                 AND e.session_id = $2 AND {})",
                live(s, "e")
            ),
            holders: format!(
                "SELECT e.id, e.owner, e.value, \
                 (extract(epoch FROM ss.expires_at - now()) * 1000)::int8, e.kind, e.lim \
                 FROM {s}.entries e JOIN {s}.sessions ss ON ss.id = e.session_id \
                 WHERE e.namespace = $1 AND e.key = $2 AND e.kind = ANY($3) \
                 AND ss.expires_at > now() AND {} ORDER BY e.id",
                granted(s)
            ),
            ..Self::notifying(s)
        }
    }

    /// The statements that delete or change entries and notify their
    /// keys; the others are filled in by [`Statements::new`].
    fn notifying(s: &str) -> Self {
        let entries_gone = |condition: &str| {
            format!("gone AS (DELETE FROM {s}.entries WHERE {condition} {RETURNING_KEYS})")
        };
        Self {
            withdraw: notifying(
                s,
                &entries_gone("owner = $1 AND session_id = $2"),
                COUNT_TOLD,
            ),
            set_value: notifying_with(
                s,
                &format!(
                    "gone AS (UPDATE {s}.entries e SET value = $3 WHERE e.id = $1 \
                     AND e.session_id = $2 AND {} {RETURNING_KEYS})",
                    live(s, "e")
                ),
                COUNT_TOLD,
                CHANGED,
            ),
            reap: notifying(
                s,
                &format!(
                    "dead AS (DELETE FROM {s}.sessions WHERE id IN (SELECT id FROM \
                     {s}.sessions WHERE expires_at <= now() FOR UPDATE SKIP LOCKED) \
                     RETURNING id), {}",
                    entries_gone("session_id IN (SELECT id FROM dead)")
                ),
                COUNT_TOLD,
            ),
            force_release: notifying(
                s,
                &format!(
                    "head AS (SELECT e.id FROM {s}.entries e WHERE e.namespace = $1 \
                     AND e.key = $2 AND e.kind <> 'permit' AND {} AND {}), {}",
                    live(s, "e"),
                    granted(s),
                    entries_gone("id IN (SELECT id FROM head)")
                ),
                COUNT_TOLD,
            ),
            close_sessions: notifying(
                s,
                &format!(
                    "{}, dead AS (DELETE FROM {s}.sessions WHERE id = ANY($1))",
                    entries_gone("session_id = ANY($1)")
                ),
                COUNT_TOLD,
            ),
            purge: notifying(s, &entries_gone("namespace = $1"), COUNT_TOLD),
            ..Self::default()
        }
    }
}

/// What a statement's `gone` rows return: each changed entry's key and id.
const RETURNING_KEYS: &str = "RETURNING namespace, key, id";

/// The answer of most [`notifying`] statements: how many keys were told.
const COUNT_TOLD: &str = "count(*) FROM told";

/// A statement that deletes the entries its `ctes` leave in `gone`
/// (returning `namespace, key, id`), notifies each one's key in the same
/// statement (so in the same transaction), and answers `answer` (which
/// may read `told`).
fn notifying(s: &str, ctes: &str, answer: &str) -> String {
    notifying_with(s, ctes, answer, GONE)
}

/// [`notifying`] with `payload`: [`GONE`] for entries deleted, [`CHANGED`]
/// for entries still there.
fn notifying_with(s: &str, ctes: &str, answer: &str, payload: &str) -> String {
    format!(
        "WITH {ctes}, told AS (SELECT pg_notify({s}.channel(namespace, key), {payload}) \
         FROM gone) SELECT {answer}"
    )
}

/// The payload of a deleted entry's notification: its id negated (see
/// [`crate::listen`]).
const GONE: &str = "(-id)::text";

/// The payload of a changed entry's notification: its id.
const CHANGED: &str = "id::text";

/// True when the entry aliased `alias` is in a live session.
fn live(s: &str, alias: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM {s}.sessions WHERE sessions.id = {alias}.session_id \
         AND sessions.expires_at > now())"
    )
}

/// True when the entry aliased `e` holds, by the layout's grant rule.
fn granted(s: &str) -> String {
    format!("{s}.ahead_of(e.namespace, e.key, e.id, e.kind, e.lim) IS NULL")
}
