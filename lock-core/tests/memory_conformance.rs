//! The conformance suite against the in-memory reference backend.

use lock_core::conformance::FnFactory;
use lock_core::Locker;

async fn memory_factory() -> FnFactory {
    FnFactory::new(|settings| async move {
        Ok(Locker::memory("conformance")?.with_options(settings.locker_options()))
    })
}

lock_core::conformance_tests!(mem, memory_factory);
