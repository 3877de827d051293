//! `distlock schema`: the SQL that creates the PostgreSQL store's tables,
//! functions and version row in the schema the URL's `schema` option
//! names (default `distlock`), for operators who create them themselves
//! and run the store with `create_schema=false`. Nothing is sent to a
//! server: the text comes from the store crate, the same text the store
//! runs on first use.

use lock_core::url::known_stores::POSTGRES;

use crate::exit::{Failure, SUCCESS};
use crate::output;
use crate::url::ChosenStore;

/// Prints the SQL for `store`'s URL. A URL of another store, a bad URL
/// or a bad schema name is a usage failure naming the problem.
pub(crate) fn schema(store: &ChosenStore) -> Result<i32, Failure> {
    let scheme = lock_core::url::scheme_of(store.as_str()).map_err(Failure::from)?;
    if !POSTGRES.schemes.contains(&scheme) {
        return Err(Failure::usage(format!(
            "`distlock schema` prints the tables of the PostgreSQL store: give --url \
             postgres://… or postgresql://… (the URL is {}, a {scheme}:// URL)",
            store.shown()
        )));
    }
    output::line(&sql_for(store.as_str())?)?;
    Ok(SUCCESS)
}

/// The SQL for a PostgreSQL URL, read the way the store reads it (every
/// option checked, `schema` among them).
#[cfg(feature = "postgres")]
fn sql_for(url: &str) -> Result<String, Failure> {
    use distlock::postgres::{schema_sql, PgStore};
    let parsed = lock_core::open::parse::<PgStore>(url)?;
    Ok(schema_sql(&parsed.config.schema))
}

/// Without the store compiled in, the failure names the feature.
#[cfg(not(feature = "postgres"))]
fn sql_for(_url: &str) -> Result<String, Failure> {
    Err(Failure::usage(format!(
        "{} is not compiled into this build: rebuild distlock-cli with the `postgres` feature \
         enabled",
        POSTGRES.name
    )))
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::*;

    #[test]
    fn the_sql_names_the_schema_of_the_url() {
        let sql = sql_for("postgres://app@db.internal/app?schema=locks_a").unwrap();
        assert!(
            sql.contains("CREATE SCHEMA IF NOT EXISTS \"locks_a\""),
            "{sql}"
        );
        assert!(!sql.contains("\"distlock\""), "{sql}");
        let default = sql_for("postgresql://db.internal").unwrap();
        assert!(default.contains("\"distlock\".entries"), "{default}");
    }

    #[test]
    fn a_bad_schema_name_is_a_usage_failure_naming_it() {
        let failure = sql_for("postgres://db.internal?schema=Locks").unwrap_err();
        assert_eq!(failure.code, crate::exit::USAGE);
        assert!(
            failure.message.contains("option `schema`"),
            "{}",
            failure.message
        );
    }
}
