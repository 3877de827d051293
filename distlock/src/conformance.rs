//! Running the conformance suite against a store named by URL
//! (`distlock check`, and the backend test crates).

use std::fmt;

use lock_core::{async_trait, LockError, Locker};

pub use lock_core::conformance::*;

/// Opens each locker with [`connect`](crate::connect) on a base URL, with
/// the case's `ttl` and `namespace` replacing those of the URL.
#[derive(Clone)]
pub struct UrlFactory {
    base: url::Url,
}

impl UrlFactory {
    /// Checks that `url` parses; connecting happens per locker.
    pub fn new(url: &str) -> Result<Self, LockError> {
        let base = url::Url::parse(url)
            .map_err(|error| LockError::invalid_config(format!("not a lock URL: {error}")))?;
        Ok(Self { base })
    }

    /// The URL a locker with `settings` is opened on.
    pub fn url_for(&self, settings: &CaseSettings) -> url::Url {
        let kept: Vec<(String, String)> = self
            .base
            .query_pairs()
            .filter(|(name, _)| name != "ttl" && name != "namespace")
            .map(|(n, v)| (n.into_owned(), v.into_owned()))
            .collect();
        let mut url = self.base.clone();
        url.set_query(None);
        {
            let mut query = url.query_pairs_mut();
            for (name, value) in &kept {
                query.append_pair(name, value);
            }
            query.append_pair("ttl", &format!("{}ms", settings.ttl.as_millis()));
            query.append_pair("namespace", settings.namespace.as_str());
        }
        url
    }
}

#[async_trait]
impl LockerFactory for UrlFactory {
    async fn open(&self, settings: &CaseSettings) -> Result<Locker, LockError> {
        crate::connect(self.url_for(settings).as_str()).await
    }
}

impl fmt::Debug for UrlFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UrlFactory")
            .field("base", &lock_core::redacted(&self.base))
            .finish()
    }
}
