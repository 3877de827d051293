//! Running the conformance suite against a store named by URL
//! (`distlock check`, and the backend test crates).

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex};

use lock_core::url::redact;
use lock_core::{LockError, Locker, Namespace};

pub use lock_core::backend::async_trait;
pub use lock_core::conformance::*;

/// Opens each locker with [`connect`](crate::connect) on a base URL, with
/// the case's `ttl` and `namespace` replacing those of the URL. Host-list
/// URLs (`redlock://a,b,c`, `etcd://a,b`, `zk://a,b/chroot`) work.
///
/// It remembers the namespaces it opened lockers in, so that
/// [`purge_namespaces`](Self::purge_namespaces) can remove what the cases
/// left in the store.
#[derive(Clone)]
pub struct UrlFactory {
    base: String,
    namespaces: Arc<Mutex<BTreeSet<Namespace>>>,
}

impl UrlFactory {
    /// Checks that `url` names a store compiled into this build;
    /// connecting happens per locker. Errors never contain the password.
    pub fn new(url: &str) -> Result<Self, LockError> {
        let store = crate::stores::store_for(lock_core::url::scheme_of(url)?)?;
        if store.connect.is_none() {
            return Err(store.not_compiled());
        }
        Ok(Self {
            base: url.to_owned(),
            namespaces: Arc::default(),
        })
    }

    /// Removes everything the store keeps in the namespaces this factory
    /// opened lockers in (see [`Locker::purge_namespace`]), through one
    /// connection; returns how many namespaces were purged. Call it once
    /// the cases are over: their locks are lost.
    pub async fn purge_namespaces(&self) -> Result<usize, LockError> {
        let namespaces: Vec<Namespace> = self.lock_namespaces().iter().cloned().collect();
        let Some(first) = namespaces.first() else {
            return Ok(0);
        };
        let settings = CaseSettings {
            namespace: first.clone(),
            ttl: lock_core::DEFAULT_TTL,
        };
        let locker = crate::connect(&self.url_for(&settings)).await?;
        for namespace in &namespaces {
            locker
                .with_namespace(namespace.as_str())?
                .purge_namespace()
                .await?;
        }
        self.lock_namespaces().clear();
        Ok(namespaces.len())
    }

    fn lock_namespaces(&self) -> std::sync::MutexGuard<'_, BTreeSet<Namespace>> {
        self.namespaces.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The URL a locker with `settings` is opened on.
    pub fn url_for(&self, settings: &CaseSettings) -> String {
        case_url(&self.base, settings)
    }
}

/// `base` with its `ttl` and `namespace` options replaced by those of
/// `settings`, every other option kept as written. Works on the text, so
/// host-list URLs (which the `url` crate rejects) work too.
pub fn case_url(base: &str, settings: &CaseSettings) -> String {
    let (head, query) = base.split_once('?').unwrap_or((base, ""));
    let mut pairs: Vec<String> = query
        .split('&')
        .filter(|pair| {
            let name = pair.split('=').next().unwrap_or_default();
            !pair.is_empty() && name != "ttl" && name != "namespace"
        })
        .map(str::to_owned)
        .collect();
    pairs.push(format!("ttl={}ms", settings.ttl.as_millis()));
    pairs.push(format!("namespace={}", settings.namespace.as_str()));
    format!("{head}?{}", pairs.join("&"))
}

#[async_trait]
impl LockerFactory for UrlFactory {
    async fn open(&self, settings: &CaseSettings) -> Result<Locker, LockError> {
        self.lock_namespaces().insert(settings.namespace.clone());
        crate::connect(&self.url_for(settings)).await
    }
}

impl fmt::Debug for UrlFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UrlFactory")
            .field("base", &redact(&self.base))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn case_settings_replace_the_urls_own_on_host_lists_too() {
        let settings = CaseSettings {
            namespace: lock_core::Namespace::new("case-ns").unwrap(),
            ttl: Duration::from_millis(1500),
        };
        let factory =
            UrlFactory::new("redlock://u:pw@a:1,b:2,c:3/?ttl=9s&response_timeout=1s").unwrap();
        assert_eq!(
            factory.url_for(&settings),
            "redlock://u:pw@a:1,b:2,c:3/?response_timeout=1s&ttl=1500ms&namespace=case-ns"
        );
        assert_eq!(
            case_url("zk://a:1,b:2/app", &settings),
            "zk://a:1,b:2/app?ttl=1500ms&namespace=case-ns"
        );
        assert!(!format!("{factory:?}").contains("pw"));
    }
}
