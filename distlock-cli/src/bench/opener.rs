//! Opening what one benchmark run measures: its lockers and floor probes,
//! all in a namespace of the run's own.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use distlock::Locker;

use super::floor::{self, FloorProbe};
use crate::exit::Failure;
use crate::url::ChosenStore;

/// Opens the lockers and floor probes of one run, all in the run's
/// namespace: each its own connection, or all one with `--shared`.
pub(crate) struct Opener {
    /// The store the run measures.
    pub(crate) store: ChosenStore,
    /// The run's namespace, `bench-<random>`.
    pub(crate) namespace: String,
    /// The locker and probe every caller gets with `--shared`.
    pub(crate) shared: Option<(Locker, Option<Arc<dyn FloorProbe>>)>,
}

impl Opener {
    /// An opener in a fresh namespace; with `shared`, one locker and one
    /// probe serve every caller.
    pub(crate) async fn new(store: &ChosenStore, shared: bool) -> Result<Self, Failure> {
        let mut opener = Self {
            store: store.clone(),
            namespace: format!("bench-{:016x}", random()),
            shared: None,
        };
        if shared {
            let locker = opener.open().await?;
            let probe = floor::open(store.as_str())
                .await
                .map_err(|error| store.failure(error))?
                .map(Arc::from);
            opener.shared = Some((locker, probe));
        }
        Ok(opener)
    }

    /// A locker: the shared one, or a fresh connection.
    pub(crate) async fn open(&self) -> Result<Locker, Failure> {
        if let Some((locker, _)) = &self.shared {
            return Ok(locker.clone());
        }
        let locker = self.store.connect().await?;
        Ok(locker.with_namespace(&self.namespace)?)
    }

    /// A floor probe (the shared one, or one with its own connection);
    /// `None` if the backend has no floor.
    pub(crate) async fn probe(&self) -> Result<Option<Arc<dyn FloorProbe>>, Failure> {
        if let Some((_, probe)) = &self.shared {
            return Ok(probe.clone());
        }
        let probe = floor::open(self.store.as_str())
            .await
            .map_err(|error| self.store.failure(error))?;
        Ok(probe.map(Arc::from))
    }
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opener")
            .field("store", &self.store.shown())
            .field("namespace", &self.namespace)
            .field("shared", &self.shared.is_some())
            .finish()
    }
}

/// 64 random bits from std's per-process hash keys, enough to keep bench
/// namespaces apart.
fn random() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    hasher.write_u32(std::process::id());
    hasher.finish()
}
