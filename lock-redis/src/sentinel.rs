//! Redis Sentinel: finding the master the sentinels name, and following
//! it when it fails over.
//!
//! [`MasterLink`] asks the sentinels for the master's address (`SENTINEL
//! GET-MASTER-ADDR-BY-NAME`), all at once so that one that swallows
//! packets costs nothing, connects to the first address named with the
//! URL's credentials and checks with `ROLE` that the server is a master
//! before it serves any command. A command whose
//! connection broke, timed out, or found a replica (`READONLY`) or a
//! master without its replicas (`MASTERDOWN`) marks the link stale: the
//! next command asks the sentinels again, and if they name another
//! address the link moves there and announces it (see
//! [`MasterLink::addresses`]), so the pub/sub connection follows too.
//! Sentinel itself breaks the clients' connections when it reconfigures a
//! server, so a client never keeps writing to a demoted master.

use std::sync::{Arc, Mutex, MutexGuard};

use lock_core::url::HostPort;
use lock_core::LockError;
use redis::aio::ConnectionManager;
use redis::{IntoConnectionInfo, RedisConnectionInfo, RedisError, Value};
use tokio::sync::watch;

use crate::client;
use crate::config::RedisConfig;
use crate::deadline::{bounded, Timeouts};
use crate::diagnosis::{self, detail};

/// The connection to the master the sentinels name, re-resolved after a
/// failure. Shared by every command of a backend.
pub(crate) struct MasterLink {
    config: RedisConfig,
    master_name: String,
    /// One connection per sentinel, in URL order; they connect on first
    /// use and reconnect by themselves.
    sentinels: Vec<(HostPort, ConnectionManager)>,
    current: Mutex<Current>,
    /// Held while the sentinels are asked, so that concurrent failures
    /// cause one round of questions.
    resolving: tokio::sync::Mutex<()>,
    address: watch::Sender<Option<HostPort>>,
}

#[derive(Default)]
struct Current {
    master: Option<(HostPort, ConnectionManager)>,
    /// Grows whenever the master is replaced or found failing, so that a
    /// late report about an older connection changes nothing.
    epoch: u64,
    stale: bool,
}

impl MasterLink {
    /// A link for `config` (a sentinel URL's); connects on first use.
    pub(crate) fn new(config: &RedisConfig) -> Result<Arc<Self>, LockError> {
        let master_name = config
            .master_name
            .clone()
            .ok_or_else(|| LockError::invalid_config("a sentinel URL names its master"))?;
        let sentinels = config
            .nodes
            .iter()
            .map(|node| Ok((node.clone(), sentinel_manager(config, node)?)))
            .collect::<Result<Vec<_>, LockError>>()?;
        Ok(Arc::new(Self {
            config: config.clone(),
            master_name,
            sentinels,
            current: Mutex::new(Current::default()),
            resolving: tokio::sync::Mutex::new(()),
            address: watch::Sender::new(None),
        }))
    }

    /// Where commands go, for errors: the master's name and its address
    /// if one was found.
    pub(crate) fn place(&self) -> String {
        let name = &self.master_name;
        match &self.current().master {
            Some((addr, _)) => format!("Redis master `{name}` at {addr}"),
            None => format!("Redis master `{name}`"),
        }
    }

    /// The master's address each time the link moves to a new one.
    pub(crate) fn addresses(&self) -> watch::Receiver<Option<HostPort>> {
        self.address.subscribe()
    }

    /// The master's connection, asking the sentinels first if there is
    /// none yet or the last one failed; with a [`Use`] that reports how
    /// the command went.
    pub(crate) async fn connection(
        self: &Arc<Self>,
    ) -> Result<(ConnectionManager, Use), LockError> {
        if let Some(ready) = self.ready() {
            return Ok(ready);
        }
        let _one_at_a_time = self.resolving.lock().await;
        if let Some(ready) = self.ready() {
            return Ok(ready);
        }
        let master = self.resolve().await?;
        let mut current = self.current();
        let moved = current.master.as_ref().map(|(addr, _)| addr) != Some(&master.0);
        current.epoch += 1;
        current.stale = false;
        current.master = Some(master.clone());
        let ready = (master.1, Use::new(self, current.epoch));
        drop(current);
        if moved {
            tracing::info!(master = %master.0, name = %self.master_name, "distlock: Redis Sentinel names a new master");
            self.address.send_replace(Some(master.0));
        }
        Ok(ready)
    }

    fn ready(self: &Arc<Self>) -> Option<(ConnectionManager, Use)> {
        let current = self.current();
        match (&current.master, current.stale) {
            (Some((_, manager)), false) => Some((manager.clone(), Use::new(self, current.epoch))),
            _ => None,
        }
    }

    fn current(&self) -> MutexGuard<'_, Current> {
        // Every update is a single step; a poisoned lock is still consistent.
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection of epoch `epoch` failed: ask the sentinels again
    /// before the next command (unless that happened already).
    fn failed(&self, epoch: u64) {
        let mut current = self.current();
        if current.epoch == epoch {
            current.stale = true;
            current.epoch += 1;
        }
    }

    /// Asks every sentinel at once for the master's address, and connects
    /// to the first address named that answers `ROLE` as a master.
    async fn resolve(&self) -> Result<(HostPort, ConnectionManager), LockError> {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        // All at once: a sentinel that swallows packets must not use up
        // the caller's time before the others are asked.
        let mut answers: FuturesUnordered<_> = self
            .sentinels
            .iter()
            .map(|(sentinel, manager)| async move {
                (sentinel, self.ask(sentinel, manager.clone()).await)
            })
            .collect();
        let mut problems = Vec::new();
        let mut unknown = 0;
        let mut tried = Vec::new();
        while let Some((sentinel, answer)) = answers.next().await {
            match answer {
                Ok(Some(addr)) if tried.contains(&addr) => {}
                Ok(Some(addr)) => match self.open_master(&addr).await {
                    Ok(master) => return Ok(master),
                    Err(e) if is_final(&e) => return Err(e),
                    Err(e) => {
                        problems.push(format!("{sentinel} named {addr}: {}", detail(&e)));
                        tried.push(addr);
                    }
                },
                Ok(None) => unknown += 1,
                Err(e) if is_final(&e) => return Err(e),
                Err(e) => problems.push(detail(&e)),
            }
        }
        let name = &self.master_name;
        if unknown == self.sentinels.len() {
            return Err(LockError::invalid_config(format!(
                "no sentinel knows a master named `{name}`"
            )));
        }
        Err(LockError::Unavailable {
            message: format!(
                "find the Redis master `{name}` through its sentinels: {}",
                problems.join("; ")
            ),
            source: None,
        })
    }

    /// One sentinel's answer: the master's address, or `None` if it does
    /// not know the name.
    async fn ask(
        &self,
        sentinel: &HostPort,
        mut manager: ConnectionManager,
    ) -> Result<Option<HostPort>, LockError> {
        let question = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.master_name)
            .to_owned();
        let what = format!("ask sentinel {sentinel}");
        let asked = bounded(
            &what,
            Timeouts::new(&self.config),
            question.query_async::<Option<(String, u16)>>(&mut manager),
        )
        .await;
        match asked {
            Ok(reply) => Ok(reply.map(|(host, port)| HostPort::new(host, port))),
            Err(error) => {
                let nodes = std::slice::from_ref(sentinel);
                Err(diagnosis::explain(&self.config, &diagnosis::SENTINEL, nodes, error).await)
            }
        }
    }

    /// A connection to `addr` once `ROLE` says it is a master (the current
    /// one is kept if the address did not change).
    async fn open_master(
        &self,
        addr: &HostPort,
    ) -> Result<(HostPort, ConnectionManager), LockError> {
        let kept = self
            .current()
            .master
            .clone()
            .filter(|(current, _)| current == addr);
        let mut manager = match kept {
            Some((_, manager)) => manager,
            None => self.config.connection_manager(addr)?,
        };
        let what = format!("ask {addr} for its role");
        let asked = bounded(
            &what,
            Timeouts::new(&self.config),
            redis::cmd("ROLE").query_async::<Vec<Value>>(&mut manager),
        )
        .await;
        let role = match asked {
            Ok(role) => role,
            Err(error) => {
                let protocol = diagnosis::protocol(&self.config);
                let nodes = std::slice::from_ref(addr);
                return Err(diagnosis::explain(&self.config, protocol, nodes, error).await);
            }
        };
        match role.first() {
            Some(Value::BulkString(role)) if role == b"master" => Ok((addr.clone(), manager)),
            _ => Err(LockError::Unavailable {
                message: "it is not a master (yet): a failover is under way".to_owned(),
                source: None,
            }),
        }
    }
}

/// An error that ends the search for the master at once: the URL or the
/// credentials must change, asking elsewhere will not help.
fn is_final(error: &LockError) -> bool {
    matches!(
        error,
        LockError::InvalidConfig { .. } | LockError::PermissionDenied { .. }
    )
}

/// A command's use of the master's connection: unless told it went well,
/// it marks the link stale when dropped (a command that timed out or was
/// cancelled may have met a dead master).
pub(crate) struct Use {
    link: Arc<MasterLink>,
    epoch: u64,
    settled: bool,
}

impl Use {
    fn new(link: &Arc<MasterLink>, epoch: u64) -> Self {
        Self {
            link: Arc::clone(link),
            epoch,
            settled: false,
        }
    }

    /// How the command went: an error that may mean the master moved
    /// marks the link stale.
    pub(crate) fn settle<T>(mut self, result: &Result<T, RedisError>) {
        self.settled = !matches!(result, Err(e) if master_may_have_moved(e));
    }
}

impl Drop for Use {
    fn drop(&mut self) {
        if !self.settled {
            self.link.failed(self.epoch);
        }
    }
}

/// Errors after which the sentinels are asked again.
fn master_may_have_moved(error: &RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || matches!(
            error.kind(),
            ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
        )
        // A write inside a script on a replica fails with the script's own
        // error, which quotes the replica's.
        || error.to_string().contains("READONLY")
}

/// A connection to one sentinel, with the sentinel credentials and the
/// URL's TLS settings.
fn sentinel_manager(config: &RedisConfig, node: &HostPort) -> Result<ConnectionManager, LockError> {
    let mut settings = RedisConnectionInfo::default();
    if let Some(user) = &config.sentinel_credentials.user {
        settings = settings.set_username(user);
    }
    if let Some(password) = &config.sentinel_credentials.password {
        settings = settings.set_password(password.expose());
    }
    let refused = |e: RedisError| LockError::invalid_config(format!("Redis sentinel {node}: {e}"));
    let info = client::address(config, node)
        .into_connection_info()
        .map_err(refused)?
        .set_redis_settings(settings);
    let client = client::open_client(config, info).map_err(refused)?;
    ConnectionManager::new_lazy_with_config(client, client::manager_config(config)).map_err(refused)
}

impl RedisConfig {
    /// For a sentinel URL ([`Topology::Sentinel`](crate::Topology::Sentinel)):
    /// the address of the master the sentinels name now, checked with
    /// `ROLE`, and a connection to it set up as the store's own. Unlike the
    /// store's connections it does not follow a failover. For tools that
    /// send raw commands to the same server, such as benchmarks.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidConfig`] if the URL is not a sentinel URL or no
    /// sentinel knows the master's name; [`LockError::Unavailable`] if no
    /// sentinel answers or the master they name is not (yet) a master.
    pub async fn sentinel_master(&self) -> Result<(HostPort, ConnectionManager), LockError> {
        MasterLink::new(self)?.resolve().await
    }
}
