//! The conformance suite against a real PostgreSQL server (see
//! `common::pg_url`), opened through the store's plug-in. A lock is taken
//! away with `force_release`.

mod common;

use lock_core::conformance::FnFactory;
use lock_core::open::open_store;
use lock_postgres::PgStore;

async fn pg_factory() -> FnFactory {
    FnFactory::new(|settings| async move {
        let locker = open_store::<PgStore>(&common::pg_url()).await?;
        Ok(locker.with_options(settings.locker_options()))
    })
}

lock_core::conformance_tests!(
    postgres,
    pg_factory,
    not_applicable: [
        per_lock_expiry_placeholder,
    ]
);
