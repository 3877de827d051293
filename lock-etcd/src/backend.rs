//! [`EtcdBackend`]: the `Backend` implementation.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, SortOrder, SortTarget, Txn, TxnOp,
};
use lock_core::backend::Capability::{Remote, WatchEveryChange};
use lock_core::backend::{
    holder_stream, AcquireRequest, Acquired, Backend, Capabilities, HolderStream, Primitive,
    WaitMode,
};
use lock_core::{HoldKind, LockError, LockInfo, LockName, Namespace};

use crate::client::{range_reads, run_txn, with_retries};
use crate::concurrency;
use crate::config::{EtcdConfig, EtcdLayout};
use crate::core::EtcdCore;
use crate::keys;
use crate::limit::stored_limit;
use crate::observe::{Describe, QueueWatch};
use crate::queue;
use crate::value::{entry_holder, holder_info};

/// Locks in an etcd v3 cluster. See the crate docs for the algorithm and
/// its guarantees.
///
/// Cheap to share (`Arc` inside is not needed: lock-core wraps it). One
/// backend owns one client (a connection per endpoint), one watch stream
/// and one session lease per ttl in use.
pub struct EtcdBackend {
    core: Arc<EtcdCore>,
}

impl EtcdBackend {
    /// Connects to the cluster `config` describes, reaching a member at
    /// once (see [`EtcdConfig::connect`]): an unreachable cluster fails
    /// here with [`LockError::Unavailable`], a URL that points at another
    /// server or TLS that cannot work with [`LockError::InvalidConfig`],
    /// refused credentials with [`LockError::PermissionDenied`].
    pub async fn connect(config: EtcdConfig) -> Result<Self, LockError> {
        let client = config.connect().await?;
        Ok(Self {
            core: Arc::new(EtcdCore::new(client, config)),
        })
    }

    /// The configuration this backend was opened with.
    pub fn config(&self) -> &EtcdConfig {
        &self.core.config
    }

    /// The key prefix of `name`'s queue in the configured layout.
    fn lock_prefix(&self, name: &LockName) -> Vec<u8> {
        match &self.core.config.layout {
            EtcdLayout::Concurrency { key_prefix } => concurrency::lock_prefix(key_prefix, name),
            _ => keys::queue_prefix(name),
        }
    }

    /// How an entry describes its holder in the configured layout.
    fn describe(&self) -> Describe {
        match self.core.config.layout {
            EtcdLayout::Concurrency { .. } => concurrency::holder_info,
            _ => entry_holder,
        }
    }

    /// Whether the entry `key` is a reader's (never, in a layout without
    /// read locks).
    fn is_reader(&self, key: &[u8]) -> bool {
        self.core.config.layout == EtcdLayout::Distlock && keys::is_reader(key)
    }

    /// `operation` is not what the configured layout can express.
    fn refuse_in_foreign_layout(&self, operation: &'static str) -> Result<(), LockError> {
        match self.core.config.layout {
            EtcdLayout::Distlock => Ok(()),
            _ => Err(LockError::not_supported(self.name(), operation)),
        }
    }

    /// The entry at the head of `name`'s queue: key, value, token, lease.
    async fn holder(&self, name: &LockName) -> Result<Option<Head>, LockError> {
        Ok(self.queue_entries(name, Some(1)).await?.into_iter().next())
    }

    /// The first `limit` entries of `name`'s queue (all without a limit),
    /// oldest first.
    async fn queue_entries(
        &self,
        name: &LockName,
        limit: Option<i64>,
    ) -> Result<Vec<Head>, LockError> {
        let mut oldest_first = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend);
        if let Some(limit) = limit {
            oldest_first = oldest_first.with_limit(limit);
        }
        let prefix = self.lock_prefix(name);
        let deadline = self.core.retry_deadline(WaitMode::Try);
        let response = with_retries(deadline, "cannot read the lock queue", || {
            let mut kv = self.core.client.kv_client();
            let (prefix, oldest_first) = (prefix.clone(), oldest_first.clone());
            async move { kv.get(prefix, Some(oldest_first)).await }
        })
        .await?;
        Ok(response
            .kvs()
            .iter()
            .map(|kv| Head {
                key: kv.key().to_vec(),
                value: kv.value().to_vec(),
                token: kv.create_revision(),
                lease: kv.lease(),
            })
            .collect())
    }
}

impl EtcdBackend {
    /// The first `limit` entries of `name`'s semaphore (its stored limit).
    async fn permit_holders(&self, name: &LockName) -> Result<Vec<LockInfo>, LockError> {
        let txn = Txn::new().and_then([
            TxnOp::get(keys::limit_key(name), None),
            TxnOp::get(
                keys::permits_prefix(name),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_sort(SortTarget::Create, SortOrder::Ascend),
                ),
            ),
        ]);
        let deadline = self.core.retry_deadline(WaitMode::Try);
        let response = run_txn(
            &self.core.client,
            deadline,
            "cannot read the semaphore",
            txn,
        )
        .await?;
        let mut ranges = range_reads(&response);
        let limit = stored_limit(ranges.next()).unwrap_or(0);
        let entries = ranges
            .next()
            .map(|get| get.kvs().to_vec())
            .unwrap_or_default();
        let mut holders = Vec::new();
        for kv in entries.iter().take(limit as usize) {
            let mut info =
                holder_info(kv.create_revision(), kv.value()).with_kind(HoldKind::Permit { limit });
            info.ttl_left = self.ttl_left(kv.lease()).await;
            holders.push(info);
        }
        Ok(holders)
    }

    /// The time left on `lease` (a holder's session), or `None` if it
    /// cannot be read: one request per holder, for `inspect` and
    /// `holders`, which operators call, never the lock path.
    async fn ttl_left(&self, lease: i64) -> Option<Duration> {
        let deadline = self.core.retry_deadline(WaitMode::Try);
        with_retries(deadline, "cannot read the holder's lease", || {
            let mut leases = self.core.client.lease_client();
            async move { leases.time_to_live(lease, None).await }
        })
        .await
        .ok()
        .map(|lease| Duration::from_secs(u64::try_from(lease.ttl()).unwrap_or(0)))
    }

    /// The entries holding `name`'s lock: the head of the queue if it is a
    /// writer's, else the readers' entries before the first writer's.
    async fn holding(&self, name: &LockName) -> Result<Vec<Head>, LockError> {
        let heads = self.queue_entries(name, None).await?;
        let mut holding = Vec::new();
        for head in heads {
            let reader = self.is_reader(&head.key);
            if !reader && !holding.is_empty() {
                break;
            }
            holding.push(head);
            if !reader {
                break;
            }
        }
        Ok(holding)
    }
}

/// The holder's entry, as read by `inspect` and `force_release`.
struct Head {
    key: Vec<u8>,
    /// The owner and the holder's value (see [`crate::value`]).
    value: Vec<u8>,
    token: i64,
    lease: i64,
}

#[async_trait]
impl Backend for EtcdBackend {
    /// `etcd`; `etcd-concurrency` in `layout=concurrency`.
    fn name(&self) -> &'static str {
        match self.core.config.layout {
            EtcdLayout::Concurrency { .. } => concurrency::NAME,
            _ => "etcd",
        }
    }

    fn capabilities(&self) -> Capabilities {
        match self.core.config.layout {
            EtcdLayout::Concurrency { .. } => concurrency::CAPABILITIES,
            // Locks live as long as the session lease, not each on its
            // own: no `per_lock_expiry`. A watch applies every event of
            // the queue (see `observe`), so it reports every change.
            _ => Capabilities::QUEUEING_STORE.with(&[Remote, WatchEveryChange]),
        }
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Option<Acquired>, LockError> {
        match &self.core.config.layout {
            EtcdLayout::Concurrency { key_prefix } => {
                concurrency::acquire(&self.core, key_prefix, request).await
            }
            _ => queue::acquire(&self.core, request).await,
        }
    }

    /// The oldest entry of the queue (owner and value), with the time left
    /// on its lease.
    async fn inspect(&self, name: &LockName) -> Result<Option<LockInfo>, LockError> {
        let Some(head) = self.holder(name).await? else {
            return Ok(None);
        };
        let mut info = self.describe()(&head.key, head.token, &head.value);
        info.ttl_left = self.ttl_left(head.lease).await;
        Ok(Some(info))
    }

    /// The head of the queue if it is a writer's entry; else every
    /// reader's entry before the first writer's: those hold.
    async fn holders(
        &self,
        name: &LockName,
        primitive: Primitive,
    ) -> Result<Vec<LockInfo>, LockError> {
        if primitive == Primitive::Semaphore {
            self.refuse_in_foreign_layout("semaphores")?;
            return self.permit_holders(name).await;
        }
        let mut holders = Vec::new();
        for head in self.holding(name).await? {
            let kind = match self.is_reader(&head.key) {
                true => HoldKind::Shared,
                false => HoldKind::Exclusive,
            };
            let mut info = self.describe()(&head.key, head.token, &head.value).with_kind(kind);
            info.ttl_left = self.ttl_left(head.lease).await;
            holders.push(info);
        }
        Ok(holders)
    }

    /// A read of the whole queue, then a watch on its prefix, on the
    /// backend's watch stream (see `observe`).
    fn watch(&self, name: &LockName) -> HolderStream {
        holder_stream(QueueWatch::new(
            self.core.client.clone(),
            self.core.hub.clone(),
            self.core.config.response_timeout,
            (self.lock_prefix(name), name.key().to_string()),
            self.describe(),
        ))
    }

    /// Deletes the holder's entry (only it: the waiters keep their places,
    /// and the next one is woken by the deletion). The holder's guard
    /// reports [`lock_core::LossReason::TakenAway`].
    async fn force_release(&self, name: &LockName) -> Result<bool, LockError> {
        let mut removed = false;
        for head in self.holding(name).await? {
            let txn = Txn::new()
                .when([Compare::create_revision(
                    head.key.clone(),
                    CompareOp::Equal,
                    head.token,
                )])
                .and_then([TxnOp::delete(head.key, None)]);
            let deadline = self.core.retry_deadline(WaitMode::Try);
            let response =
                run_txn(&self.core.client, deadline, "cannot remove the lock", txn).await?;
            removed |= response.succeeded();
        }
        Ok(removed)
    }

    /// Deletes every key under `distlock/<namespace>/` in one request:
    /// queues, semaphores and their limits. Holders' watches on their own
    /// entries report the locks taken away; the leases stay (they belong
    /// to the sessions, which may hold locks in other namespaces). In
    /// `layout=concurrency` keys have no namespace: `NotSupported`.
    async fn purge_namespace(&self, namespace: &Namespace) -> Result<(), LockError> {
        self.refuse_in_foreign_layout("removing a whole namespace")?;
        let prefix = keys::namespace_prefix(namespace);
        let deadline = self.core.retry_deadline(WaitMode::Try);
        with_retries(deadline, "cannot remove the namespace", || {
            let mut kv = self.core.client.kv_client();
            let prefix = prefix.clone();
            async move {
                kv.delete(prefix, Some(DeleteOptions::new().with_prefix()))
                    .await
            }
        })
        .await?;
        Ok(())
    }
}

impl fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("config", &self.core.config)
            .finish_non_exhaustive()
    }
}
